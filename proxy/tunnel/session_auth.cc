// SPDX-License-Identifier: Apache-2.0
// Authentication: a tunnel with tunnel.auth.mode psk admits a peer only once
// it has proved that it holds one of our keys, and proves the same to it.
// The exchange, after the dialer's HELLO (docs/protocol.md, "Authentication"):
//
//   dialer   -> HELLO, AUTH(challenge: dialer nonce, the address it dialed)
//   acceptor -> AUTH(challenge: acceptor nonce)   only if that address is ours
//   dialer   -> AUTH(proof)
//   acceptor -> HELLO, AUTH(proof)           only once the dialer's proof holds
//   dialer   -> SESSION, frames ...          only once the acceptor's proof holds
//
// Every frame after the proofs travels in records the transport seals
// (authenticated; tunnel.auth.encrypt: encrypted too), under keys derived
// from the key and both nonces: a host on the path can neither read (with
// encrypt) nor alter, inject or replay a frame of an authenticated session.
// The acceptor shows a peer that has not proved anything nothing but a
// random nonce: not its node name, not its settings, not an HMAC. A failure
// ends the transport without a word, counts in rdmagw_auth_failures_total
// and is logged once per peer address.
#include <openssl/crypto.h>

#include <cassert>
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
  t.dialed = auth_->dialed;
  if (settings_.auth->certificates()) {
    t.dialer_share = auth_->dialer_share;
    t.acceptor_share = auth_->acceptor_share;
  }
  return t;
}

bool Session::send_auth(const AuthPayload& auth) {
  uint8_t* out = transport_->outbound().handshake().append_contiguous(auth_frame_size(auth));
  if (!out) {
    close(SessionEnd::kOutOfBuffers, "out of buffers", CloseMode::kAbort);
    return false;
  }
  encode_auth(out, auth);
  ++counters_.frames_out;
  transport_->request_send();
  return true;
}

bool Session::send_challenge() {
  AuthPayload c;
  c.step = AuthStep::kChallenge;
  bool dialer = role_ == Role::kDialer;
  c.value = dialer ? auth_->dialer_nonce : auth_->acceptor_nonce;
  if (dialer) {
    c.has_dialed = true;
    c.dialed = auth_->dialed;
  }
  if (settings_.auth->certificates()) {
    if (!auth_->own_share.generate())
      return auth_failed(AuthFailure::kMalformed, "cannot draw an X25519 key (OpenSSL)");
    c.has_share = true;
    c.share = auth_->own_share.public_key();
    (dialer ? auth_->dialer_share : auth_->acceptor_share) = c.share;
  }
  return send_auth(c);
}

bool Session::send_proof() {
  AuthRole role = role_ == Role::kDialer ? AuthRole::kDialer : AuthRole::kAcceptor;
  AuthTranscript t = auth_transcript(role == AuthRole::kAcceptor);
  if (!settings_.auth->certificates()) {
    AuthPayload proof;
    proof.step = AuthStep::kProof;
    proof.value = auth_proof(settings_.auth->keys->key(0), role, t);
    return send_auth(proof);
  }
  // Our certificate, then our signature over the handshake with it in.
  const NodeCredentials& creds = *settings_.auth->credentials;
  t.certificate = creds.certificate();
  std::vector<uint8_t> signature;
  if (!creds.sign(signed_transcript(role, t), &signature) || signature.size() > kMaxSignatureSize)
    return auth_failed(AuthFailure::kMalformed, "cannot sign the handshake with tunnel.auth.key_file (OpenSSL)");
  AuthPayload cert;
  cert.step = AuthStep::kCertificate;
  cert.blob = creds.certificate();
  AuthPayload sig;
  sig.step = AuthStep::kSignature;
  sig.blob = signature;
  return send_auth(cert) && send_auth(sig);
}

bool Session::send_auth_after_hello(std::span<const uint8_t> hello) {
  if (role_ == Role::kDialer) {
    // A new transport: a new exchange, with a nonce of its own.
    auth_ = std::make_unique<AuthExchange>();
    auth_->dialer_hello.assign(hello.begin(), hello.end());
    if (!draw_nonce(&auth_->dialer_nonce))
      return auth_failed(AuthFailure::kMalformed, "no random bytes for a nonce (RAND_bytes failed)");
    // The address we dialed goes into both proofs: they are good only at
    // the host we meant to reach.
    IpBytes local;
    if (!transport_->addresses(&local, &auth_->dialed))
      return auth_failed(AuthFailure::kMalformed, "this transport cannot tell the address it dialed");
    auth_->expect = AuthStep::kChallenge;
    link_ = Link::kAuth;
    return send_challenge();
  }
  // Acceptor: the dialer proved itself; now we do, over both HELLOs.
  auth_->acceptor_hello.assign(hello.begin(), hello.end());
  bool sent = send_proof();
  auth_.reset();
  return sent;
}

bool Session::hold_hello(std::span<const uint8_t> payload, HelloPayload hello) {
  if (!(hello.capabilities & kCapAuth))
    return auth_failed(AuthFailure::kMismatch,
                       role_ == Role::kAcceptor
                           ? "the peer does not authenticate (its tunnel.auth.mode is none, or it is no rdmagw)"
                           : "the peer does not authenticate (its tunnel.auth.mode is none)");
  if (!(hello.capabilities & kCapBound))
    return auth_failed(AuthFailure::kMismatch,
                       "the peer is an older rdmagw: its proofs do not name the address it dialed, and its frames "
                       "are not authenticated (docs/security.md); upgrade it");
  bool peer_certs = (hello.capabilities & kCapCert) != 0;
  if (peer_certs != settings_.auth->certificates())
    return auth_failed(AuthFailure::kMismatch,
                       peer_certs ? "the peer authenticates with a certificate (tunnel.auth.mode cert) and this side "
                                    "with a pre-shared key (psk)"
                                  : "this side authenticates with a certificate (tunnel.auth.mode cert) and the peer "
                                    "with a pre-shared key (psk)");
  bool peer_encrypts = (hello.capabilities & kCapEncrypt) != 0;
  if (peer_encrypts != settings_.auth->encrypt)
    return auth_failed(AuthFailure::kMismatch,
                       peer_encrypts ? "the peer encrypts (tunnel.auth.encrypt: true) and this side does not"
                                     : "this side encrypts (tunnel.auth.encrypt: true) and the peer does not");
  if (role_ == Role::kAcceptor) {
    auth_ = std::make_unique<AuthExchange>();
    auth_->dialer_hello.assign(payload.begin(), payload.end());
  } else {
    auth_->acceptor_hello.assign(payload.begin(), payload.end());
  }
  auth_->peer_hello = std::move(hello);
  // Acceptor: the dialer's challenge comes next; dialer: the acceptor's proof.
  auth_->expect = role_ == Role::kAcceptor         ? AuthStep::kChallenge
                  : settings_.auth->certificates() ? AuthStep::kCertificate
                                                   : AuthStep::kProof;
  link_ = Link::kAuth;
  return true;
}

namespace {
std::string_view step_name(AuthStep step) {
  switch (step) {
    case AuthStep::kChallenge:
      return "challenge";
    case AuthStep::kProof:
      return "proof";
    case AuthStep::kCertificate:
      return "certificate";
    case AuthStep::kSignature:
      return "signature";
  }
  return "?";
}
}  // namespace

bool Session::on_auth(std::span<const uint8_t> payload) {
  std::string reason;
  AuthPayload got;
  if (!decode_auth(payload, &got, &reason)) return protocol_error(reason);
  if (got.step != auth_->expect)
    return protocol_error("AUTH " + std::string(step_name(got.step)) + " out of turn (" +
                          std::string(step_name(auth_->expect)) + " expected)");
  bool certs = settings_.auth->certificates();
  if (got.has_dialed != (role_ == Role::kAcceptor && got.step == AuthStep::kChallenge))
    return protocol_error(got.has_dialed ? "AUTH names an address where it should not"
                                         : "the dialer's AUTH challenge does not name the address it dialed");
  if (got.step == AuthStep::kChallenge && got.has_share != certs)
    return protocol_error(certs ? "an AUTH challenge without a key share (mode cert)"
                                : "an AUTH challenge with a key share (mode psk)");
  switch (got.step) {
    case AuthStep::kChallenge:
      return on_auth_challenge(got);
    case AuthStep::kProof:
      return on_auth_proof(got);
    case AuthStep::kCertificate:
      // Kept until the signature that must verify with it.
      auth_->peer_certificate.assign(got.blob.begin(), got.blob.end());
      auth_->expect = AuthStep::kSignature;
      return true;
    case AuthStep::kSignature:
      return on_auth_signature(got);
  }
  return protocol_error("AUTH step unknown");
}

bool Session::on_auth_challenge(const AuthPayload& got) {
  bool certs = settings_.auth->certificates();
  if (role_ == Role::kAcceptor) {
    // A host the dialer reached in our place (a relay that passes our
    // answers back) would be named here, not us.
    IpBytes local, remote;
    if (!transport_->addresses(&local, &remote))
      return auth_failed(AuthFailure::kMalformed, "this transport cannot tell the address it was reached at");
    if (got.dialed != local)
      return auth_failed(AuthFailure::kWrongAddress,
                         "the peer dialed " + ip_bytes_text(got.dialed) + ", not this host's " + ip_bytes_text(local) +
                             ": a host between the two relays the connection (or translates its address, which "
                             "authenticated tunnels do not allow)");
    auth_->dialed = got.dialed;
    auth_->dialer_nonce = got.value;
    if (certs) auth_->dialer_share = got.share;
    if (!draw_nonce(&auth_->acceptor_nonce))
      return auth_failed(AuthFailure::kMalformed, "no random bytes for a nonce (RAND_bytes failed)");
    auth_->expect = certs ? AuthStep::kCertificate : AuthStep::kProof;
    return send_challenge();
  }
  auth_->acceptor_nonce = got.value;
  if (certs) auth_->acceptor_share = got.share;
  auth_->expect = certs ? AuthStep::kCertificate : AuthStep::kProof;
  link_ = Link::kHello;  // the acceptor's HELLO comes once our proof holds
  if (!send_proof()) return false;
  // Everything after our proof travels in records, both ways: with a key,
  // keyed by the one we proved with (the one the acceptor verifies it
  // with); with certificates, by the secret our two key shares make.
  return certs ? protect_records_with_shares() : protect_records(settings_.auth->keys->key(0));
}

bool Session::on_auth_proof(const AuthPayload& got) {
  const SecretKeys& keys = *settings_.auth->keys;
  if (role_ == Role::kAcceptor) {
    std::optional<size_t> key = verify_auth_proof(keys, AuthRole::kDialer, auth_transcript(false), got.value);
    if (!key) return auth_failed(AuthFailure::kProof, no_key_matches(keys));
    peer_proof_ = PeerProof{PeerProof::Kind::kKey, keys.id(*key), {}, 0};
    // Our HELLO and proof are the first records: the dialer turned its
    // records on when it sent the proof we just verified.
    if (!protect_records(keys.key(*key))) return false;
    HelloPayload hello = std::move(auth_->peer_hello);
    return accept_hello(std::move(hello));  // sends our HELLO and proof
  }
  std::optional<size_t> key = verify_auth_proof(keys, AuthRole::kAcceptor, auth_transcript(true), got.value);
  if (!key) return auth_failed(AuthFailure::kProof, no_key_matches(keys));
  peer_proof_ = PeerProof{PeerProof::Kind::kKey, keys.id(*key), {}, 0};
  HelloPayload hello = std::move(auth_->peer_hello);
  auth_.reset();
  return accept_hello(std::move(hello));
}

bool Session::on_auth_signature(const AuthPayload& got) {
  bool acceptor = role_ == Role::kAcceptor;
  // The dialer's certificate must list the address it connects from; the
  // acceptor's, the address the dialer dialed (as TLS checks a host name).
  IpBytes local, remote;
  if (acceptor && !transport_->addresses(&local, &remote))
    return auth_failed(AuthFailure::kMalformed, "this transport cannot tell the peer's address");
  const IpBytes& where = acceptor ? remote : auth_->dialed;
  AuthTranscript t = auth_transcript(!acceptor);
  t.certificate = auth_->peer_certificate;
  VerifiedPeer peer;
  std::string detail;
  AuthFailure failure = AuthFailure::kMalformed;
  if (!settings_.auth->credentials->verify_peer(
          auth_->peer_certificate, where, acceptor ? std::string_view() : settings_.expected_peer,
          signed_transcript(acceptor ? AuthRole::kDialer : AuthRole::kAcceptor, t), got.blob, &peer, &failure, &detail))
    return auth_failed(failure, detail);
  // The certificate says who the peer is; its HELLO must not say otherwise.
  if (auth_->peer_hello.node != peer.name)
    return auth_failed(AuthFailure::kWrongName, "the peer calls itself " + auth_->peer_hello.node +
                                                    " in HELLO, but its certificate names " + peer.name);
  peer_proof_ = PeerProof{PeerProof::Kind::kCertificate, {}, std::move(auth_->peer_certificate), peer.not_after};
  if (acceptor && !protect_records_with_shares()) return false;
  HelloPayload hello = std::move(auth_->peer_hello);
  if (!acceptor) auth_.reset();
  return accept_hello(std::move(hello));  // the acceptor: sends our HELLO, certificate and signature
}

bool Session::recheck_peer() {
  if (state_ == State::kClosed || state_ == State::kResuming || !settings_.auth) return true;
  std::string why = proof_problem(peer_proof_, *settings_.auth);
  if (why.empty()) return true;
  revoke(why);
  return false;
}

bool Session::reauthenticate(std::string_view reason) {
  if (!resumable_ || state_ != State::kOpen || frozen_ || peer_closing_) return false;
  assert(!parsing_);
  suspend(reason);  // the dialer dials a new transport at once; the acceptor's peer sees this one close
  return true;
}

void Session::revoke(std::string_view why) {
  if (settings_.metrics) settings_.metrics->sessions_revoked.add();
  log::warn("session_revoked")
      .kv("peer", peer_label())
      .kv("remote", remote_address_)
      .kv("streams", streams_.size())
      .kv("reason", why);
  close(SessionEnd::kRevoked, "the peer's proof no longer holds: " + std::string(why), CloseMode::kFlush);
}

bool Session::protect_records_with_shares() {
  std::array<uint8_t, 32> secret{};
  const auto& peer = role_ == Role::kDialer ? auth_->acceptor_share : auth_->dialer_share;
  if (!auth_->own_share.derive(peer, &secret))
    return auth_failed(AuthFailure::kMalformed, "the peer's key share is not a valid X25519 public key");
  bool ok = protect_records(secret);
  OPENSSL_cleanse(secret.data(), secret.size());
  return ok;
}

bool Session::protect_records(std::span<const uint8_t> key) {
  Protection protection = settings_.auth->encrypt ? Protection::kEncrypt : Protection::kAuthenticate;
  FrameKeys keys;
  if (!derive_frame_keys(key, auth_->dialer_nonce, auth_->acceptor_nonce, protection, &keys))
    return auth_failed(AuthFailure::kMalformed, "cannot derive the record keys (OpenSSL HKDF)");
  bool dialer = role_ == Role::kDialer;
  std::string error;
  if (!transport_->protect(dialer ? keys.dialer_to_acceptor : keys.acceptor_to_dialer,
                           dialer ? keys.acceptor_to_dialer : keys.dialer_to_acceptor, protection, &error))
    return auth_failed(AuthFailure::kMalformed, "cannot seal records: " + error);
  return true;
}

bool Session::auth_failed(AuthFailure failure, std::string_view reason) {
  if (settings_.metrics) settings_.metrics->auth_failure(failure).add();
  std::string host = host_of(remote_address_);
  if (first_failure_from(host))
    log::warn("auth_failed")
        .kv("remote", host)
        .kv("role", role_ == Role::kDialer ? "dialer" : "acceptor")
        .kv("transport", transport_kind_name(transport_kind_))
        .kv("failure", auth_failure_name(failure))
        .kv("reason", reason)
        .kv("next", "further failures from this address are counted (rdmagw_auth_failures_total), not logged");
  auth_.reset();
  lose_transport(SessionEnd::kAuthFailed, std::string("authentication failed: ") + std::string(reason));
  return false;
}

}  // namespace rdmagw::tunnel
