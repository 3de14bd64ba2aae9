// SPDX-License-Identifier: Apache-2.0
// Authentication, as the session follows it: a tunnel with tunnel.auth.mode
// psk or cert admits a peer only once it has proved that it holds one of our
// keys (or a certificate our CAs signed), and proves the same to it. The
// exchange itself, one per transport, is an AuthExchange
// (auth_exchange.h); the session creates it, feeds it the HELLOs and AUTH
// frames, and follows what each step comes to.
//
// Every frame after the proofs travels in records the transport seals
// (authenticated; tunnel.auth.encrypt: encrypted too), under keys derived
// from the key and both nonces: a host on the path can neither read (with
// encrypt) nor alter, inject or replay a frame of an authenticated session.
// The acceptor shows a peer that has not proved anything nothing but a
// random nonce: not its node name, not its settings, not an HMAC. A failure
// ends the transport without a word, counts in rdmagw_auth_failures_total
// and is logged once per peer address.
#include <cassert>
#include <mutex>
#include <string>
#include <unordered_set>

#include "common/log.h"
#include "proxy/tunnel/session.h"

namespace rdmagw::tunnel {

namespace {
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

std::unique_ptr<AuthExchange> Session::new_auth_exchange() {
  return std::make_unique<AuthExchange>(role_ == Role::kDialer ? AuthRole::kDialer : AuthRole::kAcceptor,
                                        *settings_.auth, *transport_, settings_.expected_peer,
                                        &tally_.totals().frames_out);
}

bool Session::send_auth_after_hello(std::span<const uint8_t> hello) {
  // A dialer's new transport: a new exchange, with a nonce of its own. The
  // acceptor's began with the dialer's HELLO, and ends with our proof here.
  if (role_ == Role::kDialer) auth_ = new_auth_exchange();
  return follow_auth(auth_->after_our_hello(hello));
}

bool Session::hold_hello(std::span<const uint8_t> payload, HelloPayload hello) {
  if (role_ == Role::kAcceptor) auth_ = new_auth_exchange();
  return follow_auth(auth_->on_peer_hello(payload, std::move(hello)));
}

bool Session::on_auth(std::span<const uint8_t> payload) { return follow_auth(auth_->on_auth(payload)); }

bool Session::follow_auth(AuthExchange::Outcome outcome) {
  using Kind = AuthExchange::Outcome::Kind;
  switch (outcome.kind) {
    case Kind::kWaiting:
      link_ = auth_->expects_hello() ? Link::kHello : Link::kAuth;
      return true;
    case Kind::kFinished:
      auth_.reset();
      return true;
    case Kind::kProved: {
      peer_proof_ = auth_->take_peer_proof();
      HelloPayload hello = auth_->take_peer_hello();
      // The acceptor's exchange goes on: its proof follows its HELLO.
      if (role_ == Role::kDialer) auth_.reset();
      return accept_hello(std::move(hello));
    }
    case Kind::kRefused:
      return auth_failed(outcome.failure, outcome.reason);
    case Kind::kProtocolError:
      auth_.reset();
      return protocol_error(std::move(outcome.reason));
    case Kind::kOutOfBuffers:
      auth_.reset();
      close(SessionEnd::kOutOfBuffers, "out of buffers", CloseMode::kAbort);
      return false;
  }
  return false;  // not reached: every kind is handled above
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
