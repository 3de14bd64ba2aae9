// SPDX-License-Identifier: Apache-2.0
#pragma once
// Mutual authentication of two sidecars with a pre-shared key: the proofs
// the AUTH frames carry (docs/protocol.md, "Authentication"). The exchange
// itself is an AuthExchange's (auth_exchange.h); this is the cryptography.
//
// Each side draws a fresh 32-byte nonce per transport. A proof is
// HMAC-SHA256 under a key over a transcript: a label, the prover's role, the
// protocol version, the transport, both HELLO payloads as sent (the
// dialer's proof has only its own: it proves first, before the acceptor has
// shown anything), both nonces, and the address the dialer dialed. Fresh
// nonces make a proof good for one connection only; the role keeps one
// side's proof from being played back as the other's; the address makes it
// good only at the host the dialer meant to reach, which checks it against
// its own (a keyless host that relays between two members, both ways, gets
// proofs that name itself, which the member it relays to refuses). Proofs
// are compared in constant time.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

struct evp_pkey_st;

#include "common/address.h"
#include "common/node_credentials.h"
#include "common/secret_keys.h"
#include "proxy/tunnel/frame.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw::tunnel {

using AuthValue = std::array<uint8_t, kAuthValueSize>;

// The keys a worker's sessions prove and verify with: one per worker, so a
// reload swaps them on the worker's own thread. Null keys: mode none.
struct AuthKeyring {
  std::shared_ptr<const SecretKeys> keys;              // mode psk
  std::shared_ptr<const NodeCredentials> credentials;  // mode cert
  bool encrypt = false;                                // tunnel.auth.encrypt (fixed at start)
  bool certificates() const { return credentials != nullptr; }
  bool enabled() const { return (keys && !keys->empty()) || credentials; }
};

// What a peer proved itself with on a session's current transport, kept
// for as long as the session runs on it: a reload that changes this side's
// trust, and the end of the peer's certificate, are checked against it
// (Session::recheck_peer). Nothing secret: a key is kept by its id.
struct PeerProof {
  enum class Kind : uint8_t {
    kNone,         // not authenticated (mode none), or not since a takeover: resumed before anything else
    kKey,          // mode psk: the key its proof verified with
    kCertificate,  // mode cert: its certificate
  };
  Kind kind = Kind::kNone;
  SecretKeys::KeyId key{};
  std::vector<uint8_t> certificate;  // DER
  int64_t not_after = 0;             // the certificate's end, seconds since the epoch
};

// Empty if `proof` still holds under `keyring` (a reload's keys or CAs, the
// time now); otherwise why not, for the log and the session's end.
std::string proof_problem(const PeerProof& proof, const AuthKeyring& keyring);

enum class AuthRole : uint8_t { kDialer = 1, kAcceptor = 2 };

struct AuthTranscript {
  TransportKind transport = TransportKind::kTcp;
  std::span<const uint8_t> dialer_hello;    // HELLO payloads as sent
  std::span<const uint8_t> acceptor_hello;  // empty in the dialer's proof
  AuthValue dialer_nonce{};
  AuthValue acceptor_nonce{};
  IpBytes dialed{};  // the acceptor's address as the dialer dialed it
  // With certificates: both X25519 public keys, and the prover's certificate.
  std::span<const uint8_t> dialer_share, acceptor_share, certificate;
};

// A nonce from the system's CSPRNG; false if it has none to give.
bool draw_nonce(AuthValue* out);
// The proof `role` sends, under `key`.
AuthValue auth_proof(std::span<const uint8_t> key, AuthRole role, const AuthTranscript& transcript);
// Which of `keys` `proof` is role's proof under, if any (rotation: the peer
// may still prove with the old key, or already with the new one). Every
// key is tried, so the time taken says nothing about which matched.
std::optional<size_t> verify_auth_proof(const SecretKeys& keys, AuthRole role, const AuthTranscript& transcript,
                                        const AuthValue& proof);

// With certificates: what `role` signs (and its peer verifies), the same
// transcript under its own label, with both key shares and the prover's
// certificate.
std::vector<uint8_t> signed_transcript(AuthRole role, const AuthTranscript& transcript);

// An ephemeral X25519 key pair, one per transport and side: the record keys
// of a certificate handshake come from the secret the two shares make.
class KeyShare {
 public:
  KeyShare() = default;
  ~KeyShare();
  KeyShare(const KeyShare&) = delete;
  KeyShare& operator=(const KeyShare&) = delete;
  // False if OpenSSL cannot draw one.
  bool generate();
  const std::array<uint8_t, kAuthShareSize>& public_key() const { return public_; }
  // The shared secret with the peer's public key; false if it is not a
  // valid one (all-zero output included).
  bool derive(const std::array<uint8_t, kAuthShareSize>& peer, std::array<uint8_t, 32>* secret) const;

 private:
  evp_pkey_st* key_ = nullptr;
  std::array<uint8_t, kAuthShareSize> public_{};
};

}  // namespace rdmagw::tunnel
