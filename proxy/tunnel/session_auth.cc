// Authentication: a tunnel with tunnel.auth.mode psk admits a peer only once
// it has proved that it holds one of our keys, and proves the same to it.
// The exchange, after the dialer's HELLO (docs/protocol.md, "Authentication"):
//
//   dialer   -> HELLO, AUTH(challenge: dialer nonce)
//   acceptor -> AUTH(challenge: acceptor nonce)
//   dialer   -> AUTH(proof)
//   acceptor -> HELLO, AUTH(proof)           only once the dialer's proof holds
//   dialer   -> SESSION, frames ...          only once the acceptor's proof holds
//
// The acceptor shows a peer that has not proved anything nothing but a
// random nonce: not its node name, not its settings, not an HMAC. A failure
// ends the transport without a word, counts in rdmagw_auth_failures_total
// and is logged once per peer address.
#include <mutex>
#include <string>
#include <unordered_set>

#include "common/log.h"
#include "proxy/tunnel/session.h"

namespace rdmagw::tunnel {

namespace {
std::string no_key_matches(const SecretKeys& keys) {
  return "the peer's proof matches none of our " + std::to_string(keys.size()) + " keys (a different key, or no key)";
}

// Whether this is the first failure from `host` (process-wide, bounded:
// past kMaxHosts nothing more is logged, the metric still counts).
bool first_failure_from(const std::string& host) {
  constexpr size_t kMaxHosts = 4096;
  static std::mutex mu;
  static std::unordered_set<std::string> seen;
  std::lock_guard lock(mu);
  if (seen.size() >= kMaxHosts) return false;
  return seen.insert(host).second;
}
}  // namespace

AuthTranscript Session::auth_transcript(bool with_acceptor_hello) const {
  AuthTranscript t;
  t.transport = transport_kind_;
  t.dialer_hello = auth_->dialer_hello;
  if (with_acceptor_hello) t.acceptor_hello = auth_->acceptor_hello;
  t.dialer_nonce = auth_->dialer_nonce;
  t.acceptor_nonce = auth_->acceptor_nonce;
  return t;
}

bool Session::send_auth(AuthStep step, const AuthValue& value) {
  uint8_t* out = transport_->outbound().handshake().append_contiguous(kHeaderSize + kAuthPayloadSize);
  if (!out) {
    close(SessionEnd::kOutOfBuffers, "out of buffers", CloseMode::kAbort);
    return false;
  }
  AuthPayload auth;
  auth.step = step;
  auth.value = value;
  encode_auth(out, auth);
  ++counters_.frames_out;
  transport_->request_send();
  return true;
}

bool Session::send_auth_after_hello(std::span<const uint8_t> hello) {
  if (role_ == Role::kDialer) {
    // A new transport: a new exchange, with a nonce of its own.
    auth_ = std::make_unique<AuthExchange>();
    auth_->dialer_hello.assign(hello.begin(), hello.end());
    if (!draw_nonce(&auth_->dialer_nonce)) return auth_failed("no random bytes for a nonce (RAND_bytes failed)");
    auth_->expect = AuthStep::kChallenge;
    link_ = Link::kAuth;
    return send_auth(AuthStep::kChallenge, auth_->dialer_nonce);
  }
  // Acceptor: the dialer proved itself; now we do, over both HELLOs.
  auth_->acceptor_hello.assign(hello.begin(), hello.end());
  AuthValue proof = auth_proof(settings_.auth->keys->key(0), AuthRole::kAcceptor, auth_transcript(true));
  bool sent = send_auth(AuthStep::kProof, proof);
  auth_.reset();
  return sent;
}

bool Session::hold_hello(std::span<const uint8_t> payload, HelloPayload hello) {
  if (!(hello.capabilities & kCapAuth))
    return auth_failed(role_ == Role::kAcceptor
                           ? "the peer does not authenticate (its tunnel.auth.mode is none, or it is no rdmagw)"
                           : "the peer does not authenticate (its tunnel.auth.mode is none)");
  bool peer_encrypts = (hello.capabilities & kCapEncrypt) != 0;
  if (peer_encrypts != settings_.auth->encrypt)
    return auth_failed(peer_encrypts ? "the peer encrypts (tunnel.auth.encrypt: true) and this side does not"
                                     : "this side encrypts (tunnel.auth.encrypt: true) and the peer does not");
  if (role_ == Role::kAcceptor) {
    auth_ = std::make_unique<AuthExchange>();
    auth_->dialer_hello.assign(payload.begin(), payload.end());
  } else {
    auth_->acceptor_hello.assign(payload.begin(), payload.end());
  }
  auth_->peer_hello = std::move(hello);
  // Acceptor: the dialer's challenge comes next; dialer: the acceptor's proof.
  auth_->expect = role_ == Role::kAcceptor ? AuthStep::kChallenge : AuthStep::kProof;
  link_ = Link::kAuth;
  return true;
}

bool Session::on_auth(std::span<const uint8_t> payload) {
  std::string reason;
  AuthPayload got;
  if (!decode_auth(payload, &got, &reason)) return protocol_error(reason);
  if (got.step != auth_->expect)
    return protocol_error(std::string("AUTH ") + (got.step == AuthStep::kProof ? "proof" : "challenge") +
                          " out of turn");
  const SecretKeys& keys = *settings_.auth->keys;
  if (role_ == Role::kAcceptor) {
    if (got.step == AuthStep::kChallenge) {
      auth_->dialer_nonce = got.value;
      if (!draw_nonce(&auth_->acceptor_nonce)) return auth_failed("no random bytes for a nonce (RAND_bytes failed)");
      auth_->expect = AuthStep::kProof;
      return send_auth(AuthStep::kChallenge, auth_->acceptor_nonce);
    }
    std::optional<size_t> key = verify_auth_proof(keys, AuthRole::kDialer, auth_transcript(false), got.value);
    if (!key) return auth_failed(no_key_matches(keys));
    // Encrypted, our HELLO and proof are the first records: the dialer
    // turned encryption on when it sent the proof we just verified.
    if (settings_.auth->encrypt && !start_encryption(keys.key(*key))) return false;
    HelloPayload hello = std::move(auth_->peer_hello);
    return accept_hello(std::move(hello));  // sends our HELLO and proof
  }
  if (got.step == AuthStep::kChallenge) {
    auth_->acceptor_nonce = got.value;
    AuthValue proof = auth_proof(keys.key(0), AuthRole::kDialer, auth_transcript(false));
    auth_->expect = AuthStep::kProof;
    link_ = Link::kHello;  // the acceptor's HELLO comes once our proof holds
    if (!send_auth(AuthStep::kProof, proof)) return false;
    // Everything after our proof is encrypted, both ways, with keys from
    // the key we proved with (the one the acceptor verifies it with).
    return !settings_.auth->encrypt || start_encryption(keys.key(0));
  }
  if (!verify_auth_proof(keys, AuthRole::kAcceptor, auth_transcript(true), got.value))
    return auth_failed(no_key_matches(keys));
  HelloPayload hello = std::move(auth_->peer_hello);
  auth_.reset();
  return accept_hello(std::move(hello));
}

bool Session::start_encryption(std::span<const uint8_t> key) {
  FrameKeys keys;
  if (!derive_frame_keys(key, auth_->dialer_nonce, auth_->acceptor_nonce, &keys))
    return auth_failed("cannot derive the encryption keys (OpenSSL HKDF)");
  bool dialer = role_ == Role::kDialer;
  std::string error;
  if (!transport_->encrypt(dialer ? keys.dialer_to_acceptor : keys.acceptor_to_dialer,
                           dialer ? keys.acceptor_to_dialer : keys.dialer_to_acceptor, &error))
    return auth_failed("cannot encrypt: " + error);
  return true;
}

bool Session::auth_failed(std::string_view reason) {
  if (settings_.metrics) settings_.metrics->auth_failures.add();
  std::string host = host_of(remote_address_);
  if (first_failure_from(host))
    log::warn("auth_failed")
        .kv("remote", host)
        .kv("role", role_ == Role::kDialer ? "dialer" : "acceptor")
        .kv("transport", transport_kind_name(transport_kind_))
        .kv("reason", reason)
        .kv("next", "further failures from this address are counted (rdmagw_auth_failures_total), not logged");
  auth_.reset();
  lose_transport(SessionEnd::kAuthFailed, std::string("authentication failed: ") + std::string(reason));
  return false;
}

}  // namespace rdmagw::tunnel
