// SPDX-License-Identifier: Apache-2.0
// tunnel::SessionTally: a session's totals, and the same into its peer's
// metrics once it knows its peer; the sessions gauge raised once and
// lowered once, by the tally's end at the latest.
#include "proxy/tunnel/session_tally.h"

#include <catch2/catch.hpp>
#include <optional>

#include "common/metrics.h"

using namespace rdmagw;
using namespace rdmagw::tunnel;

TEST_CASE("session tally: totals always, the peer's metrics from when it is known") {
  metrics::PeerMetrics peer;
  SessionTally tally;
  tally.bytes_out(10);  // before the peer is known: the totals only
  tally.set_peer(&peer);
  tally.bytes_out(5);
  tally.bytes_in(7);
  tally.bytes_queued(3);
  tally.credit_stall();
  tally.stream_opened();
  CHECK(tally.totals().bytes_out == 15);
  CHECK(tally.totals().bytes_in == 7);
  CHECK(tally.totals().bytes_queued == 3);
  CHECK(tally.totals().credit_stalls == 1);
  CHECK(tally.totals().streams_opened == 1);
  CHECK(peer.bytes_sent.value() == 5);
  CHECK(peer.bytes_received.value() == 7);
  CHECK(peer.bytes_queued.value() == 3);
  CHECK(peer.credit_stalls.value() == 1);
  CHECK(peer.streams_opened.value() == 1);
}

TEST_CASE("session tally: the sessions gauge of the transport's kind, raised once, lowered once") {
  metrics::PeerMetrics peer;
  std::optional<SessionTally> tally(std::in_place);
  tally->count_open(TransportKind::kRdma);  // no peer yet: nothing to count in
  CHECK(peer.sessions_rdma.value() == 0);
  tally->set_peer(&peer);
  tally->count_open(TransportKind::kRdma);
  tally->count_open(TransportKind::kRdma);
  CHECK(peer.sessions_rdma.value() == 1);
  // A resume on another kind: the gauge follows the transport.
  tally->count_closed();
  tally->count_open(TransportKind::kTcp);
  CHECK(peer.sessions_rdma.value() == 0);
  CHECK(peer.sessions_tcp.value() == 1);
  tally->count_closed();
  tally->count_closed();
  CHECK(peer.sessions_tcp.value() == 0);
  tally->count_open(TransportKind::kTcp);
  REQUIRE(peer.sessions_tcp.value() == 1);
  tally.reset();  // its end lowers what it raised
  CHECK(peer.sessions_tcp.value() == 0);
}
