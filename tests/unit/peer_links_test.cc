// SPDX-License-Identifier: Apache-2.0
// A worker's links to its peers (proxy/runtime/peer_links.h), configured
// from YAML and dialing through fake connectors (no byte goes anywhere):
// tunnel.max_sessions closing the idle session to make room, or refusing;
// tunnel.sessions_per_peer claims shared by two workers' links; peers found
// by address inside peer_cidrs, refused outside them and while shut down,
// forgotten when dormant, retired when a reload leaves them out; a reload
// moving a peer's waiting streams to its new link.
#include "proxy/runtime/peer_links.h"

#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "common/log.h"
#include "fake_connector.h"
#include "fake_transport.h"
#include "test_support.h"
#include "tunnel_keys.h"

using namespace rdmagw;
using namespace std::chrono_literals;
using rdmagw::test::FakeConnector;
using rdmagw::test::FakeTransport;
using rdmagw::test::WaitingStream;
using tunnel::ResetCode;
using tunnel::TransportKind;

namespace {

std::shared_ptr<const Config> config_with(const std::string& tunnel_lines, const std::string& peers = "") {
  return test::parse_config_ok("node: host-a\ntunnel:\n  transport: tcp\n" + tunnel_lines +
                               (peers.empty() ? "" : "peers:\n" + peers));
}

// Two on-demand peers named b and c.
const char* const kPeersBC =
    "  - {name: b, address: 127.0.0.2, tcp_port: 17471}\n"
    "  - {name: c, address: 127.0.0.3, tcp_port: 17471}\n";

sockaddr_in at(const char* ip) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  REQUIRE(inet_pton(AF_INET, ip, &a.sin_addr) == 1);
  return a;
}

// One process's workers: each with its own links, one SessionDirectory.
struct Rig {
  BufferPool pool{tunnel::kBufferHeadroom + 16384, 256};
  EventLoop loop;  // not initialized: nothing here submits I/O
  FakeConnector tcp{TransportKind::kTcp};
  tunnel::SessionSettings settings;
  metrics::WorkerMetrics metrics;
  SessionDirectory directory{{nullptr, nullptr}};
  std::unique_ptr<PeerLinks> worker[2];

  explicit Rig(std::shared_ptr<const Config> config, int workers = 1) {
    log::set_level(log::Level::kError);
    settings.node = "host-a";
    test::tunnel_keys(settings).resume_timeout_ms = 0;  // sessions that end when closed
    settings.metrics = &metrics;
    for (int i = 0; i < workers; ++i)
      worker[i] = std::make_unique<PeerLinks>(
          PeerLinks::Wiring{
              loop, pool, settings, {&tcp, nullptr}, nullptr, directory, static_cast<unsigned>(i), metrics},
          config);
  }
  PeerLinks& links() { return *worker[0]; }

  // Completes the last dial; the peer answers HELLO.
  FakeTransport* answer() {
    auto t = make_io<FakeTransport>(loop, pool, tunnel::kMaxPayload, TransportKind::kTcp);
    FakeTransport* raw = t.get();
    tcp.succeed(std::move(t));
    REQUIRE(raw->inject_all(test::hello_bytes(test::hello(16384, 256 * 1024, 32ull * 1024 * 1024, "peer"))));
    loop.end_batch();
    return raw;
  }
};

}  // namespace

TEST_CASE("peer links: at tunnel.max_sessions the session idle the longest is closed to make room") {
  Rig rig(config_with("  max_sessions: 1\n", kPeersBC));
  rig.links().start();
  tunnel::PeerLink* b = rig.links().find("b");
  tunnel::PeerLink* c = rig.links().find("c");
  REQUIRE(b);
  REQUIRE(c);
  CHECK(rig.tcp.calls.empty());  // on demand: nothing dials at start
  WaitingStream idle;            // attaches without opening: b's session carries nothing
  b->submit(&idle);
  REQUIRE(rig.tcp.calls.size() == 1);
  CHECK(rig.tcp.calls[0].endpoint == "tcp:127.0.0.2:17471");
  FakeTransport* to_b = rig.answer();
  REQUIRE(b->up());

  WaitingStream busy(/*open_on_attach=*/true);
  c->submit(&busy);
  CHECK(rig.metrics.sessions_evicted.value() == 1);
  CHECK(to_b->closed());
  REQUIRE(rig.tcp.calls.size() == 2);  // c dialed in b's place
  CHECK(rig.tcp.calls[1].endpoint == "tcp:127.0.0.3:17471");
  rig.answer();
  REQUIRE(busy.opened);

  SECTION("when every session carries streams, the new one is refused and its streams reset") {
    rig.loop.end_batch();  // b's closed session is gone
    WaitingStream refused;
    b->submit(&refused);
    CHECK(rig.tcp.calls.size() == 2);
    CHECK(refused.aborts == 1);
    CHECK(refused.abort_code == ResetCode::kResource);
    CHECK(rig.metrics.sessions_refused.value() == 1);
    CHECK(rig.metrics.sessions_evicted.value() == 1);
  }
  busy.attached_to->detach(busy);
}

TEST_CASE("peer links: tunnel.sessions_per_peer: a second worker may not dial the peer a first one claimed") {
  Rig rig(config_with("  sessions_per_peer: 1\n", kPeersBC), 2);
  tunnel::PeerLink* first = rig.worker[0]->find("b");
  tunnel::PeerLink* second = rig.worker[1]->find("b");
  WaitingStream s0(true);
  first->submit(&s0);
  REQUIRE(rig.tcp.calls.size() == 1);
  rig.answer();
  REQUIRE(s0.opened);
  CHECK(rig.directory.peer_holder("b", 1) == std::optional<unsigned>(0));

  WaitingStream s1;
  CHECK_FALSE(rig.worker[1]->may_hold_session(*second));
  second->submit(&s1);
  CHECK(rig.tcp.calls.size() == 1);  // the second worker dialed nothing
  CHECK(s1.aborts == 1);
  CHECK(s1.abort_reason.find("sessions_per_peer") != std::string::npos);

  // Once the first worker's link carries nothing, its claim goes at a tick
  // (every tenth) and the second may hold a session.
  s0.attached_to->detach(s0);
  CHECK(first->close_if_idle("test"));
  rig.loop.end_batch();
  REQUIRE(first->finished());
  Clock::time_point now = rig.loop.now();
  for (int i = 1; i <= 9; ++i) rig.worker[0]->tick(now + i * 50ms);
  CHECK(rig.directory.peer_holder("b", 1) == std::optional<unsigned>(0));  // not yet
  rig.worker[0]->tick(now + 500ms);
  CHECK_FALSE(rig.directory.peer_holder("b", 1));
  CHECK(rig.worker[1]->may_hold_session(*second));
  CHECK(rig.directory.peer_holder("b", 0) == std::optional<unsigned>(1));
  // A stream handed to the first worker claims the peer there too, past the cap.
  rig.worker[0]->claim_for_handed_stream(*first);
  CHECK(rig.directory.peer_holder("b", 1) == std::optional<unsigned>(0));
  rig.worker[0]->release_claims();
  CHECK_FALSE(rig.directory.peer_holder("b", 1));
}

TEST_CASE("peer links: peers found by address inside peer_cidrs, not outside, not while shut down") {
  Rig rig(config_with("  peer_cidrs: [127.1.0.0/16, {cidr: 127.2.0.0/16, tcp_port: 27471, rdma_port: 27472}]\n"));
  std::string why;
  sockaddr_in inside = at("127.1.2.3");
  tunnel::PeerLink* link = rig.links().discover(reinterpret_cast<sockaddr*>(&inside), &why);
  REQUIRE(link);
  CHECK(link->name() == "127.1.2.3");
  CHECK(link->config().tcp_port == 7471);  // this sidecar's own ports
  CHECK(rig.links().discover(reinterpret_cast<sockaddr*>(&inside), &why) == link);
  CHECK(rig.links().find("127.1.2.3") == link);
  CHECK(rig.links().find_or_discover("127.2.0.9")->config().tcp_port == 27471);  // the entry's ports

  sockaddr_in outside = at("127.3.0.1");
  CHECK_FALSE(rig.links().discover(reinterpret_cast<sockaddr*>(&outside), &why));
  CHECK(why == "destination is outside tunnel.peer_cidrs");
  CHECK_FALSE(rig.links().find_or_discover("127.3.0.1"));

  rig.links().begin_shutdown();
  sockaddr_in another = at("127.1.9.9");
  CHECK_FALSE(rig.links().discover(reinterpret_cast<sockaddr*>(&another), &why));
  CHECK(why == "draining: no new peers");
  CHECK(rig.links().discover(reinterpret_cast<sockaddr*>(&inside), &why) == link);  // known ones stay
  rig.links().end_shutdown();
  CHECK(rig.links().discover(reinterpret_cast<sockaddr*>(&another), &why));

  std::vector<PeerLinks::DiscoveredState> listed;
  rig.links().describe_discovered(&listed);
  CHECK(listed.size() == 3);

  SECTION("a dormant one is forgotten after 5 minutes") {
    Clock::time_point now = rig.loop.now();
    rig.links().tick(now + 299s);
    CHECK(rig.links().find("127.1.2.3"));
    rig.links().tick(now + 301s);
    CHECK_FALSE(rig.links().find("127.1.2.3"));
  }
  SECTION("a reload leaving its address out retires it; its waiting streams are reset") {
    WaitingStream waiting;
    rig.tcp.fail_at_once = "refused by the test";  // the stream waits for a retry
    link->submit(&waiting);
    REQUIRE(waiting.aborts == 0);
    rig.links().apply(config_with("  peer_cidrs: [{cidr: 127.2.0.0/16, tcp_port: 27471, rdma_port: 27472}]\n"));
    CHECK_FALSE(rig.links().find("127.1.2.3"));
    CHECK(rig.links().find("127.2.0.9"));  // still inside, at the same ports
    CHECK(waiting.aborts == 1);
    CHECK(waiting.abort_code == ResetCode::kPeerGone);
    CHECK(waiting.abort_reason.find("left tunnel.peer_cidrs") != std::string::npos);
  }
}

TEST_CASE("peer links: while shut down, a reload's new links dial nothing; undrain leaves retired links retired") {
  Rig rig(config_with("", kPeersBC));
  rig.links().start();
  rig.links().begin_shutdown();
  rig.links().apply(config_with("", "  - {name: b, address: 127.0.0.4, tcp_port: 17471}\n"));  // b re-addressed, c gone
  tunnel::PeerLink* b = rig.links().find("b");
  REQUIRE(b);
  WaitingStream refused;
  b->submit(&refused);
  CHECK(refused.aborts == 1);
  CHECK(refused.abort_code == ResetCode::kShutdown);
  CHECK(rig.tcp.calls.empty());
  rig.links().end_shutdown();
  WaitingStream carried;
  b->submit(&carried);
  CHECK(carried.aborts == 0);
  REQUIRE(rig.tcp.calls.size() == 1);
  CHECK(rig.tcp.calls[0].endpoint == "tcp:127.0.0.4:17471");
  // The old links of b and c were retired by the reload: they stay so.
  std::vector<std::string> removed;
  rig.links().for_each([&](const tunnel::PeerLink& l) {
    if (l.state_name() == "removed") removed.push_back(l.name());
  });
  CHECK(removed.size() == 2);
  rig.answer();
}

TEST_CASE("peer links: a reload moves a re-addressed peer's waiting streams to its new link, resets a removed one's") {
  Rig rig(config_with("", kPeersBC));
  rig.links().start();
  rig.tcp.fail_at_once = "refused by the test";  // streams wait for a retry
  WaitingStream to_b, to_c;
  rig.links().find("b")->submit(&to_b);
  rig.links().find("c")->submit(&to_c);
  REQUIRE(rig.tcp.calls.size() == 2);
  rig.tcp.fail_at_once.clear();
  rig.links().apply(config_with("", "  - {name: b, address: 127.0.0.4, tcp_port: 17471}\n"));
  tunnel::PeerLink* b = rig.links().find("b");
  REQUIRE(b);
  CHECK(b->config().address == "127.0.0.4");
  CHECK_FALSE(rig.links().find("c"));
  REQUIRE(rig.tcp.calls.size() == 3);  // b's new link dialed for its stream
  CHECK(rig.tcp.calls[2].endpoint == "tcp:127.0.0.4:17471");
  CHECK(to_b.aborts == 0);
  CHECK(to_c.aborts == 1);
  CHECK(to_c.abort_code == ResetCode::kPeerGone);
  CHECK(to_c.abort_reason.find("removed by a reload") != std::string::npos);
  rig.answer();
  CHECK(to_b.attaches == 1);
}
