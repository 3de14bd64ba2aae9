// SPDX-License-Identifier: Apache-2.0
// tunnel::HandshakeBudget: the process-wide and per-address limits on
// connections in their handshake, and slots that go back exactly once.
#include "proxy/tunnel/handshake_budget.h"

#include <catch2/catch.hpp>

using namespace rdmagw::tunnel;

TEST_CASE("handshake budget: per address, then for the process; a slot goes back when dropped or released") {
  HandshakeBudget budget(3, 2);
  HandshakeBudget::Refusal why = HandshakeBudget::Refusal::kNone;
  HandshakeSlot a1 = budget.try_acquire("10.0.0.1", &why);
  HandshakeSlot a2 = budget.try_acquire("10.0.0.1", &why);
  CHECK((a1 && a2));
  CHECK_FALSE(budget.try_acquire("10.0.0.1", &why));
  CHECK(why == HandshakeBudget::Refusal::kAddress);
  HandshakeSlot b1 = budget.try_acquire("10.0.0.2", &why);
  CHECK(b1);
  CHECK_FALSE(budget.try_acquire("10.0.0.3", &why));
  CHECK(why == HandshakeBudget::Refusal::kTotal);
  CHECK(budget.in_use() == 3);

  a1.release();
  a1.release();  // once only
  CHECK(budget.in_use() == 2);
  {
    HandshakeSlot moved = std::move(a2);
    CHECK_FALSE(a2);
    CHECK(budget.in_use() == 2);
  }  // dropped: back
  CHECK(budget.in_use() == 1);
  HandshakeSlot again = budget.try_acquire("10.0.0.1", &why);
  CHECK(again);
  HandshakeSlot other = budget.try_acquire("10.0.0.1", &why);
  CHECK(other);
  // Move-assigning over a held slot gives the held one back.
  other = std::move(again);
  CHECK(budget.in_use() == 2);
}

TEST_CASE("handshake gate: no budget means no limit") {
  HandshakeGate gate(nullptr, nullptr);
  for (int i = 0; i < 1000; ++i) REQUIRE(gate.enter("10.0.0.1:1234", "tcp").has_value());
}

TEST_CASE("handshake gate: counts by address, not by port, for IPv4 and IPv6") {
  HandshakeBudget budget(10, 1);
  HandshakeGate gate(&budget, nullptr);
  auto v4 = gate.enter("10.0.0.1:1111", "tcp");
  REQUIRE(v4);
  CHECK_FALSE(gate.enter("10.0.0.1:2222", "tcp"));
  auto v6 = gate.enter("[fd00::1]:1111", "tcp");
  REQUIRE(v6);
  CHECK_FALSE(gate.enter("[fd00::1]:3333", "rdma"));
  CHECK(host_of("[fd00::1]:3333") == "[fd00::1]");
  CHECK(host_of("10.0.0.1:1") == "10.0.0.1");
  CHECK(host_of("[fd00::1]") == "[fd00::1]");
  CHECK(host_of("unix") == "unix");
  // One host whichever transport, and an IPv4 peer on a dual-stack socket.
  CHECK(host_of("rdma:10.0.0.1:5000") == "10.0.0.1");
  CHECK(host_of("rdma:[fd00::1]:5000") == "[fd00::1]");
  CHECK(host_of("[::ffff:10.0.0.1]:7471") == "10.0.0.1");
  CHECK(host_of("[::ffff:1]:7471") == "[::ffff:1]");
  CHECK(without_transport("rdma:10.0.0.1:5000") == "10.0.0.1:5000");
  CHECK(without_transport("10.0.0.1:5000") == "10.0.0.1:5000");
}
