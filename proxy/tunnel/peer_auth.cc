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

void put_bytes(std::vector<uint8_t>* out, std::span<const uint8_t> bytes) {
  out->insert(out->end(), bytes.begin(), bytes.end());
}

// Every variable-length part is length-prefixed, so no two transcripts
// concatenate to the same bytes.
std::vector<uint8_t> transcript_bytes(AuthRole role, const AuthTranscript& t) {
  std::vector<uint8_t> out;
  out.reserve(kLabel.size() + 8 + t.dialer_hello.size() + t.acceptor_hello.size() + 2 * kAuthValueSize +
              t.dialed.size());
  out.insert(out.end(), kLabel.begin(), kLabel.end());
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

}  // namespace rdmagw::tunnel
