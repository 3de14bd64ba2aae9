// SPDX-License-Identifier: Apache-2.0
// PayloadBatch (proxy/tunnel/payload_batch.h) by itself: streams handed
// their pieces fewest bytes first (ties in order of arrival), each stream's
// pieces side by side in their order, a dropped stream passed over, and a
// delivery that delivers again from inside (its session ending) handing
// nothing out twice.
#include "proxy/tunnel/payload_batch.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace rdmagw::tunnel;

namespace {

// A stream that only has a name: the batch touches its counters, nothing else.
struct Named final : Stream {
  explicit Named(std::string n) : name(std::move(n)) {}
  std::string name;

 protected:
  Delivery on_peer_data(std::span<const iovec>) override { return {}; }
  void on_peer_fin() override {}
  void on_peer_reset(ResetCode) override {}
  void on_send_credit() override {}
  void on_session_lost(std::string_view) override {}
};

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// What one delivery handed out: "name:piece|piece(bytes)" per stream, in order.
std::vector<std::string> deliver_all(PayloadBatch& batch) {
  std::vector<std::string> out;
  batch.deliver([&](Stream& s, std::span<const iovec> pieces, uint32_t bytes) {
    std::string line = static_cast<Named&>(s).name + ":";
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (i) line += "|";
      line.append(static_cast<const char*>(pieces[i].iov_base), pieces[i].iov_len);
    }
    out.push_back(line + "(" + std::to_string(bytes) + ")");
  });
  return out;
}

}  // namespace

TEST_CASE("payload batch: fewest bytes first, ties in order of arrival, each stream's pieces in order") {
  Named bulk("bulk"), reply("reply"), other("other");
  const std::string b1(10, 'b'), r1 = "ok", b2(10, 'B'), o1 = "xy", r2 = "!";
  PayloadBatch batch;
  CHECK(batch.empty());
  batch.add(bulk, bytes_of(b1));
  batch.add(reply, bytes_of(r1));
  batch.add(bulk, bytes_of(b2));
  batch.add(other, bytes_of(o1));
  batch.add(reply, bytes_of(r2));
  CHECK_FALSE(batch.empty());
  CHECK(deliver_all(batch) ==
        std::vector<std::string>{"other:xy(2)", "reply:ok|!(3)", "bulk:" + b1 + "|" + b2 + "(20)"});
  CHECK(batch.empty());
  CHECK(deliver_all(batch).empty());  // nothing twice
  // Ties: in order of first arrival.
  batch.add(reply, bytes_of(r1));
  batch.add(other, bytes_of(o1));
  CHECK(deliver_all(batch) == std::vector<std::string>{"reply:ok(2)", "other:xy(2)"});
}

TEST_CASE("payload batch: a dropped stream's pieces are not handed out") {
  Named a("a"), b("b");
  const std::string x = "xxx", y = "y";
  PayloadBatch batch;
  batch.add(a, bytes_of(x));
  batch.add(b, bytes_of(y));
  batch.add(a, bytes_of(x));
  batch.drop(a);
  batch.drop(a);  // twice is harmless
  CHECK(deliver_all(batch) == std::vector<std::string>{"b:y(1)"});
  // A dropped stream's piece after the others' takes none of their places.
  const std::string y2 = "z";
  batch.add(b, bytes_of(y));
  batch.add(b, bytes_of(y2));
  batch.add(a, bytes_of(x));
  batch.drop(a);
  CHECK(deliver_all(batch) == std::vector<std::string>{"b:y|z(2)"});
  SECTION("dropped while the batch is handed out") {
    batch.add(a, bytes_of(x));
    batch.add(b, bytes_of(y));
    std::vector<std::string> got;
    batch.deliver([&](Stream& s, std::span<const iovec>, uint32_t) {
      got.push_back(static_cast<Named&>(s).name);
      batch.drop(a);  // b goes first (1 byte): a leaves before its turn
    });
    CHECK(got == std::vector<std::string>{"b"});
  }
}

TEST_CASE("payload batch: a delivery that delivers again from inside (its session ending) hands nothing out twice") {
  Named a("a"), b("b");
  const std::string x = "x", yy = "yy";
  PayloadBatch batch;
  batch.add(a, bytes_of(x));
  batch.add(b, bytes_of(yy));
  std::vector<std::string> got;
  batch.deliver([&](Stream& s, std::span<const iovec>, uint32_t) {
    got.push_back(static_cast<Named&>(s).name);
    batch.deliver([&](Stream&, std::span<const iovec>, uint32_t) { got.push_back("again"); });
  });
  CHECK(got == std::vector<std::string>{"a", "b"});
  CHECK(batch.empty());
}

TEST_CASE("payload batch: full at kMaxPieces") {
  Named a("a");
  const std::string x = "x";
  PayloadBatch batch;
  for (size_t i = 0; i + 1 < PayloadBatch::kMaxPieces; ++i) batch.add(a, bytes_of(x));
  CHECK_FALSE(batch.full());
  batch.add(a, bytes_of(x));
  CHECK(batch.full());
  std::vector<std::string> got = deliver_all(batch);
  REQUIRE(got.size() == 1);
  CHECK(got[0].ends_with("(" + std::to_string(PayloadBatch::kMaxPieces) + ")"));
  CHECK_FALSE(batch.full());
}
