// SPDX-License-Identifier: Apache-2.0
#include "proxy/tunnel/peer_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <string_view>
#include <vector>

namespace rdmagw::tunnel {

namespace {
constexpr std::string_view kLabel = "rdmagw peer auth v2";
constexpr std::string_view kCertLabel = "rdmagw peer auth v2 cert";

void put_bytes(std::vector<uint8_t>* out, std::span<const uint8_t> bytes) {
  out->insert(out->end(), bytes.begin(), bytes.end());
}

// Every variable-length part is length-prefixed, so no two transcripts
// concatenate to the same bytes.
std::vector<uint8_t> transcript_bytes(AuthRole role, const AuthTranscript& t, std::string_view label = kLabel) {
  std::vector<uint8_t> out;
  out.reserve(kLabel.size() + 8 + t.dialer_hello.size() + t.acceptor_hello.size() + 2 * kAuthValueSize +
              t.dialed.size());
  out.insert(out.end(), label.begin(), label.end());
  out.push_back(static_cast<uint8_t>(role));
  uint8_t field[2];
  put_u16(field, kProtocolVersion);
  put_bytes(&out, field);
  out.push_back(static_cast<uint8_t>(t.transport));
  for (auto hello : {t.dialer_hello, t.acceptor_hello}) {
    put_u16(field, static_cast<uint16_t>(hello.size()));
    put_bytes(&out, field);
    put_bytes(&out, hello);
  }
  put_bytes(&out, t.dialer_nonce);
  put_bytes(&out, t.acceptor_nonce);
  put_bytes(&out, t.dialed);
  return out;
}
}  // namespace

std::vector<uint8_t> signed_transcript(AuthRole role, const AuthTranscript& t) {
  std::vector<uint8_t> out = transcript_bytes(role, t, kCertLabel);
  uint8_t field[2];
  for (auto part : {t.dialer_share, t.acceptor_share, t.certificate}) {
    put_u16(field, static_cast<uint16_t>(part.size()));
    put_bytes(&out, field);
    put_bytes(&out, part);
  }
  return out;
}

KeyShare::~KeyShare() { EVP_PKEY_free(key_); }

bool KeyShare::generate() {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, nullptr);
  size_t len = public_.size();
  bool ok = ctx && EVP_PKEY_keygen_init(ctx) > 0 && EVP_PKEY_keygen(ctx, &key_) > 0 &&
            EVP_PKEY_get_raw_public_key(key_, public_.data(), &len) > 0 && len == public_.size();
  EVP_PKEY_CTX_free(ctx);
  return ok;
}

bool KeyShare::derive(const std::array<uint8_t, kAuthShareSize>& peer, std::array<uint8_t, 32>* secret) const {
  if (!key_) return false;
  EVP_PKEY* theirs = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer.data(), peer.size());
  EVP_PKEY_CTX* ctx = theirs ? EVP_PKEY_CTX_new(key_, nullptr) : nullptr;
  size_t len = secret->size();
  // OpenSSL refuses a share that makes an all-zero secret (a small-order point).
  bool ok = ctx && EVP_PKEY_derive_init(ctx) > 0 && EVP_PKEY_derive_set_peer(ctx, theirs) > 0 &&
            EVP_PKEY_derive(ctx, secret->data(), &len) > 0 && len == secret->size();
  EVP_PKEY_CTX_free(ctx);
  EVP_PKEY_free(theirs);
  return ok;
}

bool draw_nonce(AuthValue* out) { return RAND_bytes(out->data(), static_cast<int>(out->size())) == 1; }

AuthValue auth_proof(std::span<const uint8_t> key, AuthRole role, const AuthTranscript& transcript) {
  std::vector<uint8_t> message = transcript_bytes(role, transcript);
  AuthValue mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), message.data(), message.size(), mac.data(), &len);
  return mac;
}

std::optional<size_t> verify_auth_proof(const SecretKeys& keys, AuthRole role, const AuthTranscript& transcript,
                                        const AuthValue& proof) {
  std::optional<size_t> matched;
  for (size_t i = 0; i < keys.size(); ++i) {
    AuthValue expected = auth_proof(keys.key(i), role, transcript);
    bool same = CRYPTO_memcmp(expected.data(), proof.data(), proof.size()) == 0;
    if (same && !matched) matched = i;
    OPENSSL_cleanse(expected.data(), expected.size());
  }
  return matched;
}

std::string proof_problem(const PeerProof& proof, const AuthKeyring& keyring) {
  switch (proof.kind) {
    case PeerProof::Kind::kNone:
      return {};
    case PeerProof::Kind::kKey:
      if (keyring.keys && keyring.keys->holds(proof.key)) return {};
      return "the key it proved with is no longer in tunnel.auth.key_files";
    case PeerProof::Kind::kCertificate: {
      if (!keyring.credentials) return "this side no longer authenticates with certificates";
      VerifiedPeer peer;
      AuthFailure failure = AuthFailure::kMalformed;
      std::string detail;
      if (keyring.credentials->check_certificate(proof.certificate, &peer, &failure, &detail)) return {};
      return detail;
    }
  }
  return "an unknown kind of proof";
}

}  // namespace rdmagw::tunnel
