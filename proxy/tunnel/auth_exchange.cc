// SPDX-License-Identifier: Apache-2.0
// One transport's authentication: the AUTH frames, the proofs and where
// protected records begin (see the header for the exchange).
#include "proxy/tunnel/auth_exchange.h"

#include <openssl/crypto.h>

#include <utility>

namespace rdmagw::tunnel {

namespace {
std::string no_key_matches(const SecretKeys& keys) {
  return "the peer's proof matches none of our " + std::to_string(keys.size()) + " keys (a different key, or no key)";
}

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

AuthExchange::AuthExchange(AuthRole role, const AuthKeyring& keyring, Transport& transport, std::string expected_peer,
                           uint64_t* frames_out)
    : role_(role),
      keyring_(keyring),
      transport_(transport),
      expected_peer_(std::move(expected_peer)),
      frames_out_(frames_out) {}

AuthExchange::Outcome AuthExchange::refused(AuthFailure failure, std::string reason) {
  Outcome o;
  o.kind = Outcome::Kind::kRefused;
  o.failure = failure;
  o.reason = std::move(reason);
  return o;
}

AuthExchange::Outcome AuthExchange::protocol_error(std::string reason) {
  Outcome o;
  o.kind = Outcome::Kind::kProtocolError;
  o.reason = std::move(reason);
  return o;
}

AuthExchange::Outcome AuthExchange::out_of_buffers() {
  Outcome o;
  o.kind = Outcome::Kind::kOutOfBuffers;
  return o;
}

AuthExchange::Outcome AuthExchange::proved(PeerProof proof) {
  peer_proof_ = std::move(proof);
  Outcome o;
  o.kind = Outcome::Kind::kProved;
  return o;
}

AuthTranscript AuthExchange::transcript(bool with_acceptor_hello) const {
  AuthTranscript t;
  t.transport = transport_.kind();
  t.dialer_hello = dialer_hello_;
  if (with_acceptor_hello) t.acceptor_hello = acceptor_hello_;
  t.dialer_nonce = dialer_nonce_;
  t.acceptor_nonce = acceptor_nonce_;
  t.dialed = dialed_;
  if (certificates()) {
    t.dialer_share = dialer_share_;
    t.acceptor_share = acceptor_share_;
  }
  return t;
}

bool AuthExchange::send(const AuthPayload& auth) {
  uint8_t* out = transport_.outbound().handshake().append_contiguous(auth_frame_size(auth));
  if (!out) return false;
  encode_auth(out, auth);
  ++*frames_out_;
  transport_.request_send();
  return true;
}

AuthExchange::Outcome AuthExchange::send_challenge() {
  AuthPayload c;
  c.step = AuthStep::kChallenge;
  c.value = dialer() ? dialer_nonce_ : acceptor_nonce_;
  if (dialer()) {
    c.has_dialed = true;
    c.dialed = dialed_;
  }
  if (certificates()) {
    if (!own_share_.generate()) return refused(AuthFailure::kMalformed, "cannot draw an X25519 key (OpenSSL)");
    c.has_share = true;
    c.share = own_share_.public_key();
    (dialer() ? dialer_share_ : acceptor_share_) = c.share;
  }
  if (!send(c)) return out_of_buffers();
  return waiting();
}

AuthExchange::Outcome AuthExchange::send_proof() {
  AuthTranscript t = transcript(role_ == AuthRole::kAcceptor);
  if (!certificates()) {
    AuthPayload proof;
    proof.step = AuthStep::kProof;
    proof.value = auth_proof(keyring_.keys->key(0), role_, t);
    if (!send(proof)) return out_of_buffers();
    return waiting();
  }
  // Our certificate, then our signature over the handshake with it in.
  const NodeCredentials& creds = *keyring_.credentials;
  t.certificate = creds.certificate();
  std::vector<uint8_t> signature;
  if (!creds.sign(signed_transcript(role_, t), &signature) || signature.size() > kMaxSignatureSize)
    return refused(AuthFailure::kMalformed, "cannot sign the handshake with tunnel.auth.key_file (OpenSSL)");
  AuthPayload cert;
  cert.step = AuthStep::kCertificate;
  cert.blob = creds.certificate();
  AuthPayload sig;
  sig.step = AuthStep::kSignature;
  sig.blob = signature;
  if (!send(cert) || !send(sig)) return out_of_buffers();
  return waiting();
}

AuthExchange::Outcome AuthExchange::after_our_hello(std::span<const uint8_t> hello) {
  if (dialer()) {
    dialer_hello_.assign(hello.begin(), hello.end());
    if (!draw_nonce(&dialer_nonce_))
      return refused(AuthFailure::kMalformed, "no random bytes for a nonce (RAND_bytes failed)");
    // The address we dialed goes into both proofs: they are good only at
    // the host we meant to reach.
    IpBytes local;
    if (!transport_.addresses(&local, &dialed_))
      return refused(AuthFailure::kMalformed, "this transport cannot tell the address it dialed");
    expect_ = AuthStep::kChallenge;
    return send_challenge();
  }
  // Acceptor: the dialer proved itself; now we do, over both HELLOs.
  acceptor_hello_.assign(hello.begin(), hello.end());
  Outcome o = send_proof();
  if (o.kind == Outcome::Kind::kWaiting) o.kind = Outcome::Kind::kFinished;
  return o;
}

AuthExchange::Outcome AuthExchange::on_peer_hello(std::span<const uint8_t> payload, HelloPayload hello) {
  if (!(hello.capabilities & kCapAuth))
    return refused(AuthFailure::kMismatch,
                   dialer() ? "the peer does not authenticate (its tunnel.auth.mode is none)"
                            : "the peer does not authenticate (its tunnel.auth.mode is none, or it is no rdmagw)");
  if (!(hello.capabilities & kCapBound))
    return refused(AuthFailure::kMismatch,
                   "the peer is an older rdmagw: its proofs do not name the address it dialed, and its frames "
                   "are not authenticated (docs/security.md); upgrade it");
  bool peer_certs = (hello.capabilities & kCapCert) != 0;
  if (peer_certs != certificates())
    return refused(AuthFailure::kMismatch,
                   peer_certs ? "the peer authenticates with a certificate (tunnel.auth.mode cert) and this side "
                                "with a pre-shared key (psk)"
                              : "this side authenticates with a certificate (tunnel.auth.mode cert) and the peer "
                                "with a pre-shared key (psk)");
  bool peer_encrypts = (hello.capabilities & kCapEncrypt) != 0;
  if (peer_encrypts != keyring_.encrypt)
    return refused(AuthFailure::kMismatch,
                   peer_encrypts ? "the peer encrypts (tunnel.auth.encrypt: true) and this side does not"
                                 : "this side encrypts (tunnel.auth.encrypt: true) and the peer does not");
  (dialer() ? acceptor_hello_ : dialer_hello_).assign(payload.begin(), payload.end());
  peer_hello_ = std::move(hello);
  // Acceptor: the dialer's challenge comes next; dialer: the acceptor's proof.
  expect_ = !dialer() ? AuthStep::kChallenge : certificates() ? AuthStep::kCertificate : AuthStep::kProof;
  expects_hello_ = false;
  return waiting();
}

AuthExchange::Outcome AuthExchange::on_auth(std::span<const uint8_t> payload) {
  std::string reason;
  AuthPayload got;
  if (!decode_auth(payload, &got, &reason)) return protocol_error(reason);
  if (got.step != expect_)
    return protocol_error("AUTH " + std::string(step_name(got.step)) + " out of turn (" +
                          std::string(step_name(expect_)) + " expected)");
  if (got.has_dialed != (!dialer() && got.step == AuthStep::kChallenge))
    return protocol_error(got.has_dialed ? "AUTH names an address where it should not"
                                         : "the dialer's AUTH challenge does not name the address it dialed");
  if (got.step == AuthStep::kChallenge && got.has_share != certificates())
    return protocol_error(certificates() ? "an AUTH challenge without a key share (mode cert)"
                                         : "an AUTH challenge with a key share (mode psk)");
  switch (got.step) {
    case AuthStep::kChallenge:
      return on_challenge(got);
    case AuthStep::kProof:
      return on_proof(got);
    case AuthStep::kCertificate:
      // Kept until the signature that must verify with it.
      peer_certificate_.assign(got.blob.begin(), got.blob.end());
      expect_ = AuthStep::kSignature;
      return waiting();
    case AuthStep::kSignature:
      return on_signature(got);
  }
  return protocol_error("AUTH step unknown");
}

AuthExchange::Outcome AuthExchange::on_challenge(const AuthPayload& got) {
  if (!dialer()) {
    // A host the dialer reached in our place (a relay that passes our
    // answers back) would be named here, not us.
    IpBytes local, remote;
    if (!transport_.addresses(&local, &remote))
      return refused(AuthFailure::kMalformed, "this transport cannot tell the address it was reached at");
    if (got.dialed != local)
      return refused(AuthFailure::kWrongAddress,
                     "the peer dialed " + ip_bytes_text(got.dialed) + ", not this host's " + ip_bytes_text(local) +
                         ": a host between the two relays the connection (or translates its address, which "
                         "authenticated tunnels do not allow)");
    dialed_ = got.dialed;
    dialer_nonce_ = got.value;
    if (certificates()) dialer_share_ = got.share;
    if (!draw_nonce(&acceptor_nonce_))
      return refused(AuthFailure::kMalformed, "no random bytes for a nonce (RAND_bytes failed)");
    expect_ = certificates() ? AuthStep::kCertificate : AuthStep::kProof;
    return send_challenge();
  }
  acceptor_nonce_ = got.value;
  if (certificates()) acceptor_share_ = got.share;
  expect_ = certificates() ? AuthStep::kCertificate : AuthStep::kProof;
  Outcome o = send_proof();
  if (o.kind != Outcome::Kind::kWaiting) return o;
  // Everything after our proof travels in records, both ways: with a key,
  // keyed by the one we proved with (the one the acceptor verifies it
  // with); with certificates, by the secret our two key shares make.
  std::string error = certificates() ? protect_records_with_shares() : protect_records(keyring_.keys->key(0));
  if (!error.empty()) return refused(AuthFailure::kMalformed, std::move(error));
  expects_hello_ = true;  // the acceptor's HELLO comes once our proof holds
  return waiting();
}

AuthExchange::Outcome AuthExchange::on_proof(const AuthPayload& got) {
  const SecretKeys& keys = *keyring_.keys;
  AuthRole prover = dialer() ? AuthRole::kAcceptor : AuthRole::kDialer;
  std::optional<size_t> key = verify_auth_proof(keys, prover, transcript(dialer()), got.value);
  if (!key) return refused(AuthFailure::kProof, no_key_matches(keys));
  if (!dialer()) {
    // Our HELLO and proof are the first records: the dialer turned its
    // records on when it sent the proof we just verified.
    std::string error = protect_records(keys.key(*key));
    if (!error.empty()) return refused(AuthFailure::kMalformed, std::move(error));
  }
  return proved(PeerProof{PeerProof::Kind::kKey, keys.id(*key), {}, 0});
}

AuthExchange::Outcome AuthExchange::on_signature(const AuthPayload& got) {
  // The dialer's certificate must list the address it connects from; the
  // acceptor's, the address the dialer dialed (as TLS checks a host name).
  IpBytes local, remote;
  if (!dialer() && !transport_.addresses(&local, &remote))
    return refused(AuthFailure::kMalformed, "this transport cannot tell the peer's address");
  const IpBytes& where = dialer() ? dialed_ : remote;
  AuthTranscript t = transcript(dialer());
  t.certificate = peer_certificate_;
  VerifiedPeer peer;
  std::string detail;
  AuthFailure failure = AuthFailure::kMalformed;
  if (!keyring_.credentials->verify_peer(
          peer_certificate_, where, dialer() ? std::string_view(expected_peer_) : std::string_view(),
          signed_transcript(dialer() ? AuthRole::kAcceptor : AuthRole::kDialer, t), got.blob, &peer, &failure, &detail))
    return refused(failure, std::move(detail));
  // The certificate says who the peer is; its HELLO must not say otherwise.
  if (peer_hello_.node != peer.name)
    return refused(AuthFailure::kWrongName,
                   "the peer calls itself " + peer_hello_.node + " in HELLO, but its certificate names " + peer.name);
  if (!dialer()) {
    std::string error = protect_records_with_shares();
    if (!error.empty()) return refused(AuthFailure::kMalformed, std::move(error));
  }
  return proved(PeerProof{PeerProof::Kind::kCertificate, {}, std::move(peer_certificate_), peer.not_after});
}

std::string AuthExchange::protect_records_with_shares() {
  std::array<uint8_t, 32> secret{};
  if (!own_share_.derive(dialer() ? acceptor_share_ : dialer_share_, &secret))
    return "the peer's key share is not a valid X25519 public key";
  std::string error = protect_records(secret);
  OPENSSL_cleanse(secret.data(), secret.size());
  return error;
}

std::string AuthExchange::protect_records(std::span<const uint8_t> key) {
  Protection protection = keyring_.encrypt ? Protection::kEncrypt : Protection::kAuthenticate;
  FrameKeys keys;
  if (!derive_frame_keys(key, dialer_nonce_, acceptor_nonce_, protection, &keys))
    return "cannot derive the record keys (OpenSSL HKDF)";
  std::string error;
  if (!transport_.protect(dialer() ? keys.dialer_to_acceptor : keys.acceptor_to_dialer,
                          dialer() ? keys.acceptor_to_dialer : keys.dialer_to_acceptor, protection, &error))
    return "cannot seal records: " + error;
  return {};
}

}  // namespace rdmagw::tunnel
