// SPDX-License-Identifier: Apache-2.0
#include "proxy/transport/rdma/rdma_credits.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include "proxy/transport/rdma/frame_packing.h"
#include "proxy/tunnel/frame.h"

using namespace rdmagw::transport;
namespace tunnel = rdmagw::tunnel;

TEST_CASE("credits: the last two are kept for returning credits") {
  RdmaCredits c(/*peer_depth=*/4, /*own_depth=*/8);
  CHECK(c.can_send_data());
  c.on_send();
  c.on_send();
  CHECK(c.available() == 2);
  CHECK_FALSE(c.can_send_data());  // 2 left: data must wait
  CHECK_FALSE(c.should_send_update());
  for (int i = 0; i < 4; ++i) c.on_repost();
  CHECK(c.should_send_update());  // half our receives wait to be announced
  CHECK(c.on_send() == 4);        // the update carries all of them
  CHECK(c.pending_returns() == 0);
  CHECK(c.available() == 1);
}

TEST_CASE("credits: a peer returning more than it has receives is caught") {
  RdmaCredits c(4, 4);
  c.on_send();
  CHECK(c.on_receive(1));
  CHECK_FALSE(c.on_receive(1));  // would be 5 credits for 4 receives
}

// Two sides exchange messages over a simulated RC connection: each side has a
// backlog of data messages, receivers re-post lazily (a slow consumer), and
// messages take random time to arrive. No side may ever send without a credit
// (that would be an RNR on iWARP), and everything must get through: no
// deadlock even when both sides run dry at once.
TEST_CASE("credits: two sides never overrun each other and never deadlock") {
  for (uint32_t depth : {8u, 16u, 64u}) {
    std::mt19937 rng(depth);
    struct Side {
      RdmaCredits credits;
      int backlog = 0;     // data messages still to send
      int delivered = 0;   // data messages received
      int unreposted = 0;  // received, not yet re-posted (slow consumer)
      int posted = 0;      // receives currently posted
    };
    Side s[2];
    for (auto& x : s) {
      x.credits = RdmaCredits(depth, depth);
      x.backlog = 5000;
      x.posted = static_cast<int>(depth);
    }
    struct Msg {
      bool data;
      uint32_t returned;
    };
    std::deque<Msg> wire[2];  // wire[i]: from side i to side 1-i
    for (int step = 0; step < 200000; ++step) {
      int i = static_cast<int>(rng() % 2);
      Side& me = s[i];
      Side& peer = s[1 - i];
      switch (rng() % 4) {
        case 0:  // send data, or a credit update, if the rules allow
          if (me.backlog > 0 && me.credits.can_send_data()) {
            REQUIRE(peer.posted > 0);  // the RNR check: a receive must be waiting
            --peer.posted;
            wire[i].push_back({true, me.credits.on_send()});
            --me.backlog;
          } else if (me.credits.should_send_update()) {
            REQUIRE(peer.posted > 0);
            --peer.posted;
            wire[i].push_back({false, me.credits.on_send()});
          }
          break;
        case 1:  // a message from the peer arrives
          if (!wire[1 - i].empty()) {
            Msg m = wire[1 - i].front();
            wire[1 - i].pop_front();
            REQUIRE(me.credits.on_receive(m.returned));
            if (m.data) ++me.delivered;
            ++me.unreposted;
          }
          break;
        default:  // the consumer gets to one buffer: re-post it
          if (me.unreposted > 0) {
            --me.unreposted;
            ++me.posted;
            me.credits.on_repost();
          }
          break;
      }
      if (s[0].delivered == 5000 && s[1].delivered == 5000) break;
    }
    INFO("depth " << depth);
    CHECK(s[0].delivered == 5000);
    CHECK(s[1].delivered == 5000);
  }
}

namespace {
// Appends a frame with `payload` bytes to `buf`; returns its size.
size_t add_frame(std::vector<uint8_t>& buf, uint32_t payload) {
  size_t at = buf.size();
  buf.resize(at + tunnel::kHeaderSize + payload, 0xAB);
  tunnel::encode_header(buf.data() + at, tunnel::FrameType::kData, 1, payload);
  return tunnel::kHeaderSize + payload;
}
}  // namespace

TEST_CASE("packing: whole frames only, within the room and the SGE count") {
  std::vector<uint8_t> a, b, c;
  add_frame(a, 100);   // 112
  add_frame(a, 200);   // 212 -> a = 324
  add_frame(b, 1000);  // 1012
  add_frame(c, 10);    // 22
  iovec segs[3] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  PackedPiece out[5];
  uint32_t bytes = 0;

  SECTION("everything fits") {
    CHECK(pack_frames(segs, 3, 4096, 5, out, &bytes) == 3);
    CHECK(bytes == 324 + 1012 + 22);
  }
  SECTION("the room ends mid-segment: only the frames before it") {
    CHECK(pack_frames(segs, 3, 200, 5, out, &bytes) == 1);
    CHECK(bytes == 112);
    CHECK(out[0].data == a.data());
  }
  SECTION("a frame that does not fit stops the message, later small ones wait their turn") {
    CHECK(pack_frames(segs, 3, 400, 5, out, &bytes) == 1);
    CHECK(bytes == 324);
  }
  SECTION("SGE count limits pieces") {
    CHECK(pack_frames(segs, 3, 4096, 2, out, &bytes) == 2);
    CHECK(bytes == 324 + 1012);
  }
  SECTION("a first frame larger than the room yields nothing (the caller treats it as a bug)") {
    CHECK(pack_frames(segs + 1, 1, 500, 5, out, &bytes) == 0);
    CHECK(bytes == 0);
  }
}
