// SPDX-License-Identifier: Apache-2.0
#include "proxy/tunnel/frame_cipher.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include <climits>
#include <cstring>

namespace rdmagw::tunnel {

namespace {
constexpr char kEncryptLabel[] = "rdmagw frame keys v1";
constexpr char kAuthenticateLabel[] = "rdmagw frame keys v1 authenticate-only";
}  // namespace

FrameKeys::~FrameKeys() {
  OPENSSL_cleanse(dialer_to_acceptor.data(), dialer_to_acceptor.size());
  OPENSSL_cleanse(acceptor_to_dialer.data(), acceptor_to_dialer.size());
}

bool derive_frame_keys(std::span<const uint8_t> psk, const Nonce& dialer_nonce, const Nonce& acceptor_nonce,
                       Protection protection, FrameKeys* out) {
  std::string_view label = protection == Protection::kEncrypt ? kEncryptLabel : kAuthenticateLabel;
  uint8_t salt[2 * kAuthValueSize];
  std::memcpy(salt, dialer_nonce.data(), kAuthValueSize);
  std::memcpy(salt + kAuthValueSize, acceptor_nonce.data(), kAuthValueSize);
  uint8_t okm[2 * kCipherKeySize];
  size_t okm_len = sizeof(okm);
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr);
  bool ok = ctx && EVP_PKEY_derive_init(ctx) > 0 && EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) > 0 &&
            EVP_PKEY_CTX_set1_hkdf_salt(ctx, salt, sizeof(salt)) > 0 &&
            EVP_PKEY_CTX_set1_hkdf_key(ctx, psk.data(), static_cast<int>(psk.size())) > 0 &&
            EVP_PKEY_CTX_add1_hkdf_info(ctx, reinterpret_cast<const unsigned char*>(label.data()),
                                        static_cast<int>(label.size())) > 0 &&
            EVP_PKEY_derive(ctx, okm, &okm_len) > 0 && okm_len == sizeof(okm);
  EVP_PKEY_CTX_free(ctx);
  if (ok) {
    std::memcpy(out->dialer_to_acceptor.data(), okm, kCipherKeySize);
    std::memcpy(out->acceptor_to_dialer.data(), okm + kCipherKeySize, kCipherKeySize);
  }
  OPENSSL_cleanse(okm, sizeof(okm));
  return ok;
}

std::unique_ptr<FrameCipher> FrameCipher::create(const CipherKey& key, Use use, Protection protection,
                                                 std::string* error) {
  std::unique_ptr<FrameCipher> c(new FrameCipher);
  c->use_ = use;
  c->protection_ = protection;
  c->ctx_ = EVP_CIPHER_CTX_new();
  // The key is expanded once here; each record only sets its nonce.
  bool ok =
      c->ctx_ && (use == Use::kSeal ? EVP_EncryptInit_ex(c->ctx_, EVP_aes_256_gcm(), nullptr, key.data(), nullptr)
                                    : EVP_DecryptInit_ex(c->ctx_, EVP_aes_256_gcm(), nullptr, key.data(), nullptr)) > 0;
  if (!ok) {
    *error = "cannot set up AES-256-GCM (OpenSSL)";
    return nullptr;
  }
  return c;
}

FrameCipher::~FrameCipher() { EVP_CIPHER_CTX_free(ctx_); }

void FrameCipher::next_nonce(uint8_t out[12]) {
  std::memset(out, 0, 4);
  for (int i = 0; i < 8; ++i) out[4 + i] = static_cast<uint8_t>(count_ >> (56 - 8 * i));
  ++count_;
}

bool FrameCipher::seal(std::span<const iovec> plain, std::span<const uint8_t> aad, uint8_t* out) {
  if (use_ != Use::kSeal) return false;
  uint8_t nonce[12];
  next_nonce(nonce);
  int n = 0;
  if (EVP_EncryptInit_ex(ctx_, nullptr, nullptr, nullptr, nonce) <= 0) return false;
  if (!aad.empty() && EVP_EncryptUpdate(ctx_, nullptr, &n, aad.data(), static_cast<int>(aad.size())) <= 0) return false;
  size_t at = 0;
  bool encrypt = protection_ == Protection::kEncrypt;
  for (const iovec& v : plain) {
    if (v.iov_len == 0) continue;
    auto* bytes = static_cast<const uint8_t*>(v.iov_base);
    if (v.iov_len > INT_MAX) return false;
    if (!encrypt) {
      // Authenticated only: the bytes go as they are, covered by the tag.
      std::memcpy(out + at, bytes, v.iov_len);
      if (EVP_EncryptUpdate(ctx_, nullptr, &n, bytes, static_cast<int>(v.iov_len)) <= 0) return false;
      at += v.iov_len;
      continue;
    }
    if (EVP_EncryptUpdate(ctx_, out + at, &n, bytes, static_cast<int>(v.iov_len)) <= 0) return false;
    at += static_cast<size_t>(n);
  }
  if (EVP_EncryptFinal_ex(ctx_, out + at, &n) <= 0) return false;
  at += static_cast<size_t>(n);
  return EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kCipherTagSize), out + at) > 0;
}

bool FrameCipher::open(std::span<const uint8_t> sealed, std::span<const uint8_t> aad, uint8_t* out) {
  if (use_ != Use::kOpen || sealed.size() < kCipherTagSize || sealed.size() > INT_MAX) return false;
  size_t len = sealed.size() - kCipherTagSize;
  uint8_t nonce[12];
  next_nonce(nonce);
  uint8_t tag[kCipherTagSize];
  std::memcpy(tag, sealed.data() + len, kCipherTagSize);  // `out` may overwrite `sealed`
  int n = 0;
  if (EVP_DecryptInit_ex(ctx_, nullptr, nullptr, nullptr, nonce) <= 0) return false;
  if (!aad.empty() && EVP_DecryptUpdate(ctx_, nullptr, &n, aad.data(), static_cast<int>(aad.size())) <= 0) return false;
  if (protection_ == Protection::kAuthenticate) {
    // The bytes are the plaintext: only the tag is checked, over them.
    if (len > 0 && EVP_DecryptUpdate(ctx_, nullptr, &n, sealed.data(), static_cast<int>(len)) <= 0) return false;
    if (EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kCipherTagSize), tag) <= 0) return false;
    uint8_t none[kCipherTagSize];  // GCM's final step writes nothing
    if (EVP_DecryptFinal_ex(ctx_, none, &n) <= 0) return false;
    if (out != sealed.data() && len > 0) std::memmove(out, sealed.data(), len);
    return true;
  }
  if (len > 0 && EVP_DecryptUpdate(ctx_, out, &n, sealed.data(), static_cast<int>(len)) <= 0) return false;
  if (EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kCipherTagSize), tag) <= 0) return false;
  return EVP_DecryptFinal_ex(ctx_, out + len, &n) > 0;
}

}  // namespace rdmagw::tunnel
