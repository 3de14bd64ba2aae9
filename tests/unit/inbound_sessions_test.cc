// SPDX-License-Identifier: Apache-2.0
// The sessions peers dial to a worker (proxy/runtime/inbound_sessions.h),
// each dialed by a real tunnel::Session over fake transports (all from one
// address, "fake:0"): tunnel.limits.sessions_per_address, resumable sessions
// registered by token in the SessionDirectory and let go of when they end,
// a restarted peer's new session ending its old process's suspended ones,
// and the streams peers open handed to the worker's opener.
#include "proxy/runtime/inbound_sessions.h"

#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "fake_stream.h"
#include "fake_transport.h"
#include "tunnel_keys.h"

using namespace rdmagw;
using rdmagw::test::FakeOwner;
using rdmagw::test::FakeStream;
using rdmagw::test::FakeTransport;
using rdmagw::test::tunnel_keys;
using tunnel::Session;

namespace {

constexpr uint32_t kKiB = 1024;

tunnel::SessionSettings settings_for(std::string node, uint32_t sessions_per_address, uint32_t resume_ms) {
  tunnel::SessionSettings s;
  s.node = std::move(node);
  TunnelConfig& keys = tunnel_keys(s);
  keys.buffer_size = 4 * kKiB;
  keys.stream_window = 64 * kKiB;
  keys.session_budget = 256 * kKiB;
  keys.resume_timeout_ms = resume_ms;
  keys.limits.sessions_per_address = sessions_per_address;
  return s;
}

// A worker's inbound sessions, and peers that dial it.
struct Rig {
  BufferPool pool{kBufferHeadroom + 4 * kKiB, 4096};
  EventLoop loop;
  metrics::WorkerMetrics metrics;
  SessionDirectory directory{{nullptr}};
  tunnel::SessionSettings settings;
  std::vector<std::string> opened;  // targets the opener was asked for
  std::unique_ptr<InboundSessions> inbound;

  // One peer: its session and both ends of its connection (each end's
  // pointer is good until the loop deletes it: *_gone says).
  struct Peer {
    FakeOwner owner;
    FakeTransport* wire = nullptr;    // the peer's end
    FakeTransport* inside = nullptr;  // ours, which InboundSessions took
    bool wire_gone = false, inside_gone = false;
    IoPtr<Session> session;
    // Both ends see the connection break (as a cut cable).
    void cut() {
      if (!inside_gone) inside->fail("cut by the test");
      if (!wire_gone) wire->fail("cut by the test");
    }
  };
  std::vector<std::unique_ptr<Peer>> peers;

  explicit Rig(uint32_t sessions_per_address = 32, uint32_t resume_ms = 10000)
      : settings(settings_for("host-b", sessions_per_address, resume_ms)) {
    log::set_level(log::Level::kError);
    std::string error;
    if (!loop.init(64, &error)) FAIL("io_uring: " << error);
    inbound = std::make_unique<InboundSessions>(
        loop, pool, settings, 0, directory, metrics,
        [this](Session&, uint32_t, std::string_view target, const tunnel::StreamOrigin*, tunnel::ResetCode* refuse) {
          opened.emplace_back(target);
          *refuse = tunnel::ResetCode::kNotAllowed;
          return nullptr;
        });
  }
  ~Rig() {
    for (auto& p : peers) p->session.reset();
    inbound.reset();
    loop.shut_down();
  }

  // A peer (node `node`; its process `instance`) dials; both sides talk
  // until quiet.
  Peer& dial(const std::string& node, uint64_t instance) {
    auto peer = std::make_unique<Peer>();
    tunnel::SessionSettings s = settings_for(node, 32, 10000);
    s.instance = instance;
    auto wire = make_io<FakeTransport>(loop, pool, 4 * kKiB, tunnel::TransportKind::kTcp, &peer->wire_gone);
    peer->wire = wire.get();
    peer->session =
        make_io<Session>(loop, pool, Session::Role::kDialer, s, IoPtr<tunnel::Transport>(wire.release()), &peer->owner);
    auto inside = make_io<FakeTransport>(loop, pool, 4 * kKiB, tunnel::TransportKind::kTcp, &peer->inside_gone);
    peer->inside = inside.get();
    inbound->accept(IoPtr<tunnel::Transport>(inside.release()));
    peer->session->start();
    peers.push_back(std::move(peer));
    pump();
    return *peers.back();
  }

  // Carries bytes between every peer and its session here until quiet.
  void pump() {
    for (int i = 0; i < 1000; ++i) {
      loop.end_batch();
      bool moved = false;
      for (auto& p : peers) {
        if (p->wire_gone || p->inside_gone) continue;
        test::Bytes out = p->wire->drain_wire();
        test::Bytes back = p->inside->drain_wire();
        if (!out.empty() && p->inside->delivering()) {
          p->inside->inject(out);
          moved = true;
        }
        if (!back.empty() && p->wire->delivering()) {
          p->wire->inject(back);
          moved = true;
        }
      }
      if (!moved) return;
    }
    FAIL("the sessions never went quiet");
  }

  // The sessions here, by state.
  size_t count(Session::State state) const {
    size_t n = 0;
    inbound->for_each([&](const Session& s) { n += s.state() == state ? 1 : 0; });
    return n;
  }
  size_t held() const {
    size_t n = 0;
    inbound->for_each([&](const Session&) { ++n; });
    return n;
  }
  Session* here(const std::string& node) const {
    Session* found = nullptr;
    inbound->for_each([&](Session& s) {
      if (s.peer_node() == node && s.state() != Session::State::kClosed) found = &s;
    });
    return found;
  }
};

}  // namespace

TEST_CASE("inbound sessions: sessions_per_address refuses one more from the address, counted") {
  Rig rig(/*sessions_per_address=*/1);
  rig.dial("host-a", 1);
  REQUIRE(rig.count(Session::State::kOpen) == 1);
  rig.dial("host-c", 2);
  CHECK(rig.metrics.address_sessions_refused.value() == 1);
  CHECK(rig.held() == 1);  // the refused one is gone
  REQUIRE(rig.here("host-a"));
  CHECK(rig.here("host-a")->state() == Session::State::kOpen);
  CHECK_FALSE(rig.here("host-c"));
}

TEST_CASE("inbound sessions: a suspended session makes room for a new one from its address") {
  Rig rig(/*sessions_per_address=*/1);
  Rig::Peer& first = rig.dial("host-a", 1);
  REQUIRE(rig.count(Session::State::kOpen) == 1);
  // Its connection breaks: it waits, suspended, for the peer to resume.
  first.cut();
  rig.pump();
  REQUIRE(rig.count(Session::State::kResuming) == 1);
  rig.dial("host-c", 2);
  CHECK(rig.metrics.address_sessions_closed.value() == 1);
  CHECK(rig.metrics.address_sessions_refused.value() == 0);
  CHECK(rig.held() == 1);
  REQUIRE(rig.here("host-c"));
  CHECK(rig.here("host-c")->state() == Session::State::kOpen);
  CHECK_FALSE(rig.here("host-a"));
}

TEST_CASE("inbound sessions: a resumable session is in the directory until it ends") {
  Rig rig;
  rig.dial("host-a", 1);
  Session* session = rig.here("host-a");
  REQUIRE(session);
  REQUIRE(session->state() == Session::State::kOpen);
  tunnel::SessionToken token = session->token();
  CHECK(rig.directory.holder(token) == 0u);
  CHECK(rig.inbound->find_session(token) == session);
  CHECK(rig.inbound->token_in_use(token));
  session->close(tunnel::SessionEnd::kLocalClose, "done", tunnel::CloseMode::kAbort);
  rig.loop.end_batch();
  CHECK_FALSE(rig.directory.holder(token).has_value());
  CHECK(rig.inbound->find_session(token) == nullptr);
  CHECK_FALSE(rig.inbound->token_in_use(token));
  CHECK(rig.held() == 0);
}

TEST_CASE("inbound sessions: a restarted peer's new session ends its old process's suspended one") {
  Rig rig;
  Rig::Peer& old = rig.dial("host-a", /*instance=*/1);
  old.cut();
  rig.pump();
  REQUIRE(rig.count(Session::State::kResuming) == 1);
  // The same node from the same address, another process: the old one is gone.
  Rig::Peer& renewed = rig.dial("host-a", /*instance=*/2);
  CHECK(rig.held() == 1);
  CHECK(rig.count(Session::State::kOpen) == 1);
  // Another node at the same address is not the same peer: a suspended
  // session of host-a stays when host-z's new one comes.
  renewed.cut();
  rig.pump();
  REQUIRE(rig.count(Session::State::kResuming) == 1);
  rig.dial("host-z", 3);
  CHECK(rig.held() == 2);
  CHECK(rig.count(Session::State::kResuming) == 1);
  CHECK(rig.count(Session::State::kOpen) == 1);
}

TEST_CASE("inbound sessions: a stream a peer opens goes to the worker's opener") {
  Rig rig;
  Rig::Peer& peer = rig.dial("host-a", 1);
  REQUIRE(rig.count(Session::State::kOpen) == 1);
  FakeStream stream;
  REQUIRE(peer.session->open_stream(stream, "tcp:127.0.0.1:6379", nullptr, 0));
  rig.pump();
  REQUIRE(rig.opened.size() == 1);
  CHECK(rig.opened[0] == "tcp:127.0.0.1:6379");
  REQUIRE(stream.resets.size() == 1);
  CHECK(stream.resets[0] == tunnel::ResetCode::kNotAllowed);  // the opener refused it
}
