// SPDX-License-Identifier: Apache-2.0
#pragma once
// Protection of a transport's bytes after the handshake (docs/protocol.md,
// "Protected records"): AES-256-GCM through OpenSSL's EVP, one key per
// direction per transport, derived with HKDF-SHA256 from the key the dialer
// proved with and both AUTH nonces, so a key never outlives its transport (a
// resumed session gets new ones with its new handshake). Every
// authenticated tunnel authenticates every record; tunnel.auth.encrypt also
// encrypts them (kEncrypt). Authenticated only (kAuthenticate), a record's
// bytes go as they are and GCM's tag covers them as additional data (GMAC).
//
// Each record's nonce is 4 zero bytes and a 64-bit count of the records
// sealed before it: never reused under one key, and a record replayed,
// dropped or moved makes every later tag fail, so replay and reordering are
// refused by construction.
#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "proxy/tunnel/frame.h"

struct evp_cipher_ctx_st;

namespace rdmagw::tunnel {

inline constexpr size_t kCipherKeySize = 32;
inline constexpr size_t kCipherTagSize = 16;
using CipherKey = std::array<uint8_t, kCipherKeySize>;

// The two directions' keys of one transport; wiped when destroyed.
struct FrameKeys {
  CipherKey dialer_to_acceptor{};
  CipherKey acceptor_to_dialer{};
  ~FrameKeys();
};

// What records get: a tag (and their bytes as they are), or encryption too.
enum class Protection : uint8_t { kAuthenticate, kEncrypt };

// HKDF-SHA256(key, salt: dialer nonce || acceptor nonce, info: a label that
// names the protection, so that the two never share keys).
using Nonce = std::array<uint8_t, kAuthValueSize>;  // an AUTH challenge's value
bool derive_frame_keys(std::span<const uint8_t> psk, const Nonce& dialer_nonce, const Nonce& acceptor_nonce,
                       Protection protection, FrameKeys* out);

// One direction: seals (sender) or opens (receiver) records in order.
class FrameCipher {
 public:
  enum class Use { kSeal, kOpen };
  // Null (with *error) if OpenSSL cannot set it up.
  static std::unique_ptr<FrameCipher> create(const CipherKey& key, Use use, Protection protection, std::string* error);
  ~FrameCipher();
  FrameCipher(const FrameCipher&) = delete;
  FrameCipher& operator=(const FrameCipher&) = delete;

  // The next record: the bytes of `plain` (gathered), encrypted (or, to
  // authenticate only, copied) into `out` (the same length), then the tag;
  // `aad` is authenticated, not encrypted.
  bool seal(std::span<const iovec> plain, std::span<const uint8_t> aad, uint8_t* out);
  bool seal(std::span<const uint8_t> plain, std::span<const uint8_t> aad, uint8_t* out) {
    iovec one{const_cast<uint8_t*>(plain.data()), plain.size()};
    return seal(std::span<const iovec>(&one, 1), aad, out);
  }
  // The next record: `sealed` is ciphertext (or plaintext) and tag; the
  // plaintext goes to `out` (which may be `sealed` itself). False when the
  // tag does not verify: the bytes were altered, replayed, reordered or not
  // ours.
  bool open(std::span<const uint8_t> sealed, std::span<const uint8_t> aad, uint8_t* out);

 private:
  FrameCipher() = default;
  void next_nonce(uint8_t out[12]);

  evp_cipher_ctx_st* ctx_ = nullptr;
  Use use_ = Use::kSeal;
  Protection protection_ = Protection::kEncrypt;
  uint64_t count_ = 0;
};

}  // namespace rdmagw::tunnel
