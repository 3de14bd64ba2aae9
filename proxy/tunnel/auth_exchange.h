// SPDX-License-Identifier: Apache-2.0
#pragma once
// One transport's authentication (docs/protocol.md, "Authentication"): the
// dialer's from its HELLO to the acceptor's proof, the acceptor's from the
// dialer's HELLO to its own proof:
//
//   dialer   -> HELLO, AUTH(challenge: dialer nonce, the address it dialed)
//   acceptor -> AUTH(challenge: acceptor nonce)   only if that address is ours
//   dialer   -> AUTH(proof)
//   acceptor -> HELLO, AUTH(proof)           only once the dialer's proof holds
//   dialer   -> SESSION, frames ...          only once the acceptor's proof holds
//
// With certificates (tunnel.auth.mode cert) each challenge also carries an
// X25519 key share, and a proof is a certificate and a signature.
//
// An AuthExchange queues this side's AUTH frames on the transport it was made
// for, checks the peer's (and that the peer's HELLO authenticates as this
// side does, and names the node its certificate names), and turns the
// transport's protected records on where the exchange says (the dialer right
// after its proof, the acceptor once the dialer's proof holds). It neither
// sends HELLO nor decides anything about the session: each step returns an
// Outcome, and the session (session_auth.cc) follows it: what its transport
// delivers next (nothing else passes before the proofs), admitting the
// peer, or ending the transport without a word.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/auth_failure.h"
#include "proxy/tunnel/frame.h"
#include "proxy/tunnel/peer_auth.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw::tunnel {

class AuthExchange {
 public:
  // What a step came to.
  struct Outcome {
    enum class Kind : uint8_t {
      kWaiting,        // the peer's next frame is awaited: expects_hello() says which
      kFinished,       // the acceptor queued its proof: nothing more to do here
      kProved,         // the peer proved itself: take_peer_proof(), take_peer_hello()
      kRefused,        // authentication failed (failure, reason): end the transport without a word
      kProtocolError,  // the peer's AUTH frame is malformed or out of turn (reason)
      kOutOfBuffers,   // an AUTH frame could not be queued
    };
    Kind kind = Kind::kWaiting;
    AuthFailure failure = AuthFailure::kMalformed;  // kRefused
    std::string reason;                             // kRefused, kProtocolError
  };

  // `keyring` (enabled()) and `transport` outlive the exchange. A dialer's
  // `expected_peer` is the node the acceptor's certificate must name (empty:
  // any the CA signed). `frames_out` counts each AUTH frame queued.
  AuthExchange(AuthRole role, const AuthKeyring& keyring, Transport& transport, std::string expected_peer,
               uint64_t* frames_out);
  AuthExchange(const AuthExchange&) = delete;
  AuthExchange& operator=(const AuthExchange&) = delete;

  // After our HELLO, whose payload (as queued) is `hello`. The dialer draws
  // its nonce and sends its challenge; the acceptor, whose HELLO follows the
  // dialer's proof, sends its own proof (kFinished).
  Outcome after_our_hello(std::span<const uint8_t> hello);
  // The peer's HELLO (`payload` as received): refused unless it
  // authenticates as this side does; kept until the peer's proof holds.
  Outcome on_peer_hello(std::span<const uint8_t> payload, HelloPayload hello);
  // The peer's AUTH frame's payload.
  Outcome on_auth(std::span<const uint8_t> payload);

  // Whether the peer's HELLO comes next (the dialer, between the acceptor's
  // challenge and its HELLO); otherwise an AUTH frame does.
  bool expects_hello() const { return expects_hello_; }
  // The dialer sent its proof and waits for the acceptor's answer: a clean
  // end of the transport now is the acceptor refusing it.
  bool our_proof_sent() const { return role_ == AuthRole::kDialer && expect_ != AuthStep::kChallenge; }
  // After kProved: what the peer proved itself with, and its HELLO.
  PeerProof take_peer_proof() { return std::move(peer_proof_); }
  HelloPayload take_peer_hello() { return std::move(peer_hello_); }

 private:
  static Outcome waiting() { return Outcome{}; }
  static Outcome refused(AuthFailure failure, std::string reason);
  static Outcome protocol_error(std::string reason);
  static Outcome out_of_buffers();

  bool dialer() const { return role_ == AuthRole::kDialer; }
  bool certificates() const { return keyring_.certificates(); }
  AuthTranscript transcript(bool with_acceptor_hello) const;
  // Our AUTH challenge (a nonce; the dialer's: the address it dialed; with
  // certificates: a fresh key share), and our proof (an HMAC, or our
  // certificate and signature).
  Outcome send_challenge();
  Outcome send_proof();
  bool send(const AuthPayload& auth);
  Outcome on_challenge(const AuthPayload& got);
  Outcome on_proof(const AuthPayload& got);
  Outcome on_signature(const AuthPayload& got);
  // The transport seals what it sends from now on and opens what it
  // receives after the current frame (authenticated; encrypted with
  // tunnel.auth.encrypt), with keys derived from `key` and both nonces.
  // Empty on success, else why not (a kRefused reason).
  std::string protect_records(std::span<const uint8_t> key);
  // With certificates: the key is the secret our two key shares make.
  std::string protect_records_with_shares();
  // kProved, with what the peer proved itself with.
  Outcome proved(PeerProof proof);

  AuthRole role_;
  const AuthKeyring& keyring_;
  Transport& transport_;
  std::string expected_peer_;
  uint64_t* frames_out_;

  AuthStep expect_ = AuthStep::kChallenge;  // the peer's next AUTH
  bool expects_hello_ = false;
  AuthValue dialer_nonce_{}, acceptor_nonce_{};
  IpBytes dialed_{};  // the acceptor's address as the dialer dialed it
  // Mode cert: our X25519 key pair, both public keys, the peer's certificate.
  KeyShare own_share_;
  std::array<uint8_t, kAuthShareSize> dialer_share_{}, acceptor_share_{};
  std::vector<uint8_t> peer_certificate_;
  std::vector<uint8_t> dialer_hello_, acceptor_hello_;  // HELLO payloads as sent
  HelloPayload peer_hello_;                             // held until the peer's proof verifies
  PeerProof peer_proof_;
};

}  // namespace rdmagw::tunnel
