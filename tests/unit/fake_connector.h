// SPDX-License-Identifier: Apache-2.0
#pragma once
// A tunnel::Connector whose dials the test completes (or fails), and a
// stream that waits for a session: what a PeerLink is driven with in unit
// tests, where no byte goes anywhere.
#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/address.h"
#include "proxy/tunnel/peer_link.h"
#include "proxy/tunnel/session.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw::test {

using tunnel::Connector;
using tunnel::Dial;
using tunnel::DialObserver;
using tunnel::PendingStream;
using tunnel::ResetCode;
using tunnel::Session;
using tunnel::SessionToken;
using tunnel::Stream;
using tunnel::Transport;
using tunnel::TransportKind;

class FakeConnector;

class FakeDial final : public Dial {
 public:
  explicit FakeDial(FakeConnector* c);
  ~FakeDial() override;

 private:
  FakeConnector* connector_;
};

// Records each dial; the test completes the last one (or fails it at once).
class FakeConnector final : public Connector {
 public:
  explicit FakeConnector(TransportKind kind) : kind_(kind) {}
  TransportKind kind() const override { return kind_; }
  std::unique_ptr<Dial> dial(const Endpoint& peer, uint32_t timeout_ms, const SessionToken* session,
                             DialObserver* observer, std::string* error) override {
    calls.push_back(
        {peer.to_string(), timeout_ms, observer, session ? std::optional<SessionToken>(*session) : std::nullopt});
    if (!fail_at_once.empty()) {
      *error = fail_at_once;
      return nullptr;
    }
    return std::make_unique<FakeDial>(this);
  }

  // Ends the last dial.
  void succeed(IoPtr<Transport> transport) {
    REQUIRE(live_dials == 1);
    calls.back().observer->on_dialed(std::move(transport));
  }
  void fail(std::string_view reason, bool refused = false) {
    REQUIRE(live_dials == 1);
    calls.back().observer->on_dial_failed(reason, refused);
  }

  struct Call {
    std::string endpoint;
    uint32_t timeout_ms;
    DialObserver* observer;
    std::optional<SessionToken> session;  // the session the dial resumes, if any
  };
  std::vector<Call> calls;
  std::string fail_at_once;  // non-empty: dial() fails at once with this error
  int live_dials = 0;
  int dials_destroyed = 0;

 private:
  TransportKind kind_;
};

inline FakeDial::FakeDial(FakeConnector* c) : connector_(c) { ++connector_->live_dials; }
inline FakeDial::~FakeDial() {
  --connector_->live_dials;
  ++connector_->dials_destroyed;
}

// A stream waiting for a session; on attach it opens itself on it (as a
// local stream does), so that the session carries it.
class WaitingStream final : public Stream, public PendingStream {
 public:
  explicit WaitingStream(bool open_on_attach = false) : open_on_attach_(open_on_attach) {}
  ~WaitingStream() override = default;

  void attach(Session& session) override {
    attached_to = &session;
    ++attaches;
    if (open_on_attach_) opened = session.open_stream(*this, "tcp:127.0.0.1:9", nullptr, 0);
  }
  void abort(ResetCode code, std::string_view reason) override {
    ++aborts;
    abort_code = code;
    abort_reason = std::string(reason);
  }

  // Ends the stream while it waits (as a reset at the end of a drain does).
  void end() { stop_waiting(); }
  // A Service stream that may go directly when the peer's port refuses.
  bool divert_on_refusal() override {
    if (!divertible) return false;
    ++diverts;
    return true;
  }
  bool divertible = false;
  int diverts = 0;

  Session* attached_to = nullptr;
  int attaches = 0;
  int aborts = 0;
  bool opened = false;
  ResetCode abort_code = ResetCode::kCancel;
  std::string abort_reason;
  int lost = 0;
  int resets = 0;

 protected:
  Delivery on_peer_data(std::span<const iovec> pieces) override {
    Delivery d;
    for (const iovec& p : pieces) d.delivered += static_cast<uint32_t>(p.iov_len);
    return d;
  }
  void on_peer_fin() override {}
  void on_peer_reset(ResetCode) override { ++resets; }
  void on_send_credit() override {}
  void on_session_lost(std::string_view) override { ++lost; }

 private:
  bool open_on_attach_;
};

}  // namespace rdmagw::test
