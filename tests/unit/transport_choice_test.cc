// SPDX-License-Identifier: Apache-2.0
// TransportChoice (proxy/tunnel/transport_choice.h) by itself: the kind each
// mode dials with and without an RDMA connector, auto's three RDMA failures
// and the proving time that forgives them, the share, the head start's
// clamp, and the reasons /peers shows. PeerLink's tests drive the same
// object through real dials.
#include "proxy/tunnel/transport_choice.h"

#include <catch2/catch.hpp>
#include <chrono>

using namespace rdmagw;
using namespace rdmagw::tunnel;
using namespace std::chrono_literals;

namespace {
TunnelConfig keys(TransportMode mode) {
  TunnelConfig t;
  t.transport = mode;
  t.keepalive_timeout_ms = 1000;  // proving time: 2 s
  t.connect_timeout_ms = 4000;
  t.rdma_head_start_ms = 500;
  return t;
}
}  // namespace

TEST_CASE("transport choice: tcp and rdma modes, and auto without an RDMA connector") {
  TunnelConfig tcp = keys(TransportMode::kTcp), rdma = keys(TransportMode::kRdma), autom = keys(TransportMode::kAuto);
  CHECK(TransportChoice(tcp, true, true, "a", "10.0.0.2").preferred() == TransportKind::kTcp);
  CHECK(TransportChoice(tcp, true, true, "a", "10.0.0.2").reason() == "configured");
  CHECK(TransportChoice(autom, false, true, "a", "10.0.0.2").preferred() == TransportKind::kTcp);
  CHECK(TransportChoice(autom, false, true, "a", "10.0.0.2").reason() == "no usable RDMA device here");
  TransportChoice only_rdma(rdma, true, true, "a", "10.0.0.2");
  for (int i = 0; i < 5; ++i) only_rdma.rdma_failed();
  CHECK(only_rdma.preferred() == TransportKind::kRdma);  // rdma never falls back
  CHECK_FALSE(only_rdma.falls_back_to_tcp());
  CHECK_FALSE(only_rdma.tcp_head_start_ms());
  CHECK_FALSE(only_rdma.probes_rdma());
}

TEST_CASE("transport choice: auto goes to TCP after three RDMA failures, back once RDMA carried for the proving time") {
  TunnelConfig t = keys(TransportMode::kAuto);
  TransportChoice c(t, true, true, "a", "10.0.0.2");
  CHECK(c.preferred() == TransportKind::kRdma);
  CHECK(c.reason() == "RDMA device available");
  CHECK(c.falls_back_to_tcp());
  c.rdma_failed();
  c.rdma_failed();
  CHECK(c.preferred() == TransportKind::kRdma);
  c.rdma_failed();
  CHECK(c.preferred() == TransportKind::kTcp);
  // A probe's RDMA transport that carries for twice keepalive_timeout_ms
  // clears the failures; one that lives less counts as one more.
  Clock::time_point t0{};
  c.carrying(TransportKind::kRdma, t0);
  c.tick(t0 + 1999ms);
  CHECK(c.rdma_failures() == 3);
  c.tick(t0 + 2s);
  CHECK(c.rdma_failures() == 0);
  CHECK(c.preferred() == TransportKind::kRdma);
  c.carrying(TransportKind::kRdma, t0 + 10s);
  std::optional<Clock::duration> lived = c.transport_lost(t0 + 10s + 300ms);
  REQUIRE(lived);
  CHECK(*lived == 300ms);
  CHECK(c.rdma_failures() == 1);
  CHECK_FALSE(c.transport_lost(t0 + 11s));  // nothing on RDMA any more
  c.carrying(TransportKind::kRdma, t0 + 20s);
  CHECK_FALSE(c.transport_lost(t0 + 23s));  // it proved itself: no failure
  CHECK(c.rdma_failures() == 1);
  c.carrying(TransportKind::kTcp, t0 + 30s);
  CHECK_FALSE(c.transport_lost(t0 + 30s));
}

TEST_CASE("transport choice: the head start is at most half of connect_timeout_ms, and only in auto with TCP") {
  TunnelConfig t = keys(TransportMode::kAuto);
  CHECK(TransportChoice(t, true, true, "a", "p").tcp_head_start_ms() == std::optional<uint32_t>(500));
  t.rdma_head_start_ms = 3000;
  CHECK(TransportChoice(t, true, true, "a", "p").tcp_head_start_ms() == std::optional<uint32_t>(2000));
  CHECK_FALSE(TransportChoice(t, true, false, "a", "p").tcp_head_start_ms());
  t.rdma_head_start_ms = 0;
  CHECK_FALSE(TransportChoice(t, true, true, "a", "p").tcp_head_start_ms());
}

TEST_CASE("transport choice: rdma_share picks peers by node and address, and says so; a reload's share applies") {
  TunnelConfig t = keys(TransportMode::kAuto);
  t.rdma_share = 0;
  TransportChoice c(t, true, true, "a", "10.0.0.2");
  CHECK_FALSE(c.in_rdma_share());
  CHECK(c.preferred() == TransportKind::kTcp);
  CHECK(c.reason() == "tunnel.rdma_share is 0%, and this peer is not in that share");
  CHECK(c.opened_on(TransportKind::kTcp) == "tunnel.rdma_share is 0%, and this peer is not in that share");
  t.rdma_share = 100;  // the link's copy, changed in place by a reload
  CHECK(c.in_rdma_share());
  CHECK(c.preferred() == TransportKind::kRdma);
  // The same answer on every worker, restart and build: FNV-1a of node,
  // NUL, address, modulo 100, below the share. Pinned: ("a", "10.0.0.2")
  // hashes to 23, ("host-a", "10.0.0.5") to 41, ("node-1", "fd00::7") to 54.
  struct Pinned {
    const char* node;
    const char* address;
    uint32_t at;
  };
  for (Pinned p : {Pinned{"a", "10.0.0.2", 23}, Pinned{"host-a", "10.0.0.5", 41}, Pinned{"node-1", "fd00::7", 54}}) {
    INFO(p.node << " " << p.address);
    t.rdma_share = p.at;
    CHECK_FALSE(TransportChoice(t, true, true, p.node, p.address).in_rdma_share());
    t.rdma_share = p.at + 1;
    CHECK(TransportChoice(t, true, true, p.node, p.address).in_rdma_share());
  }
  // About half of many peers at 50%.
  t.rdma_share = 50;
  int in = 0;
  for (int i = 0; i < 200; ++i)
    in += TransportChoice(t, true, true, "a", "10.0.1." + std::to_string(i)).in_rdma_share();
  CHECK(in > 60);
  CHECK(in < 140);
  // The node counts too: one peer is in the share of some nodes only.
  int nodes_in = 0;
  for (int i = 0; i < 200; ++i)
    nodes_in += TransportChoice(t, true, true, "node-" + std::to_string(i), "10.0.1.1").in_rdma_share();
  CHECK(nodes_in > 60);
  CHECK(nodes_in < 140);
}

TEST_CASE("transport choice: the reason a session keeps") {
  TunnelConfig t = keys(TransportMode::kAuto);
  TransportChoice c(t, true, true, "a", "10.0.0.2");
  CHECK(c.opened_on(TransportKind::kRdma) == "RDMA CM connect succeeded");
  CHECK(c.reason() == "RDMA CM connect succeeded");
  TransportChoice fell(t, true, true, "a", "10.0.0.2");
  CHECK(fell.opened_on(TransportKind::kTcp) == "RDMA failed; falling back");
  fell.set_reason("tunnel.rdma.max_pinned reached: TCP instead");
  CHECK(fell.opened_on(TransportKind::kTcp) == "tunnel.rdma.max_pinned reached: TCP instead");
  CHECK(fell.reason() == "tunnel.rdma.max_pinned reached: TCP instead");
}
