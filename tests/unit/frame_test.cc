// SPDX-License-Identifier: Apache-2.0
#include "proxy/tunnel/frame.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/protocol_limits.h"
#include "config/config.h"

using namespace rdmagw::tunnel;

namespace {
// Runs the stream decoder over `bytes` and returns the frames it finds.
struct Decoded {
  std::vector<FrameHeader> headers;
  std::vector<std::vector<uint8_t>> payloads;
  FrameReader::Status last;
  std::string reason;
};
Decoded decode_all(const std::vector<uint8_t>& bytes, uint32_t max_data = 16384) {
  Decoded d;
  FrameReader reader(max_data);
  size_t off = 0;
  while (true) {
    FrameHeader h;
    std::span<const uint8_t> p;
    size_t used = 0;
    d.last = reader.next(bytes.data() + off, bytes.size() - off, &h, &p, &used, &d.reason);
    if (d.last != FrameReader::Status::kFrame) break;
    d.headers.push_back(h);
    d.payloads.emplace_back(p.begin(), p.end());
    off += used;
  }
  return d;
}
}  // namespace

TEST_CASE("HELLO round-trips every field") {
  HelloPayload in;
  in.max_data = 16384;
  in.stream_window = 262144;
  in.session_window = 1ull << 32;  // the largest a peer may announce
  in.capabilities = 0x5;
  in.node = "host-a";
  std::vector<uint8_t> buf(kHeaderSize + kHelloFixedSize + in.node.size());
  REQUIRE(encode_hello(buf.data(), in) == buf.size());
  auto d = decode_all(buf);
  REQUIRE(d.headers.size() == 1);
  CHECK(d.headers[0].type == FrameType::kHello);
  HelloPayload out;
  std::string reason;
  REQUIRE(decode_hello(d.payloads[0], &out, &reason));
  CHECK(out.version == kProtocolVersion);
  CHECK(out.capabilities == 0x5);
  CHECK(out.max_data == 16384);
  CHECK(out.stream_window == 262144);
  CHECK(out.session_window == (1ull << 32));
  CHECK(out.node == "host-a");
}

TEST_CASE("OPEN carries target and first bytes written in place before the payload") {
  std::vector<uint8_t> buf(kBufferHeadroom + 5);
  std::memcpy(buf.data() + kBufferHeadroom, "hello", 5);
  uint8_t* frame = encode_open_before(buf.data() + kBufferHeadroom, 7, "tcp:127.0.0.1:6379", 5);
  std::vector<uint8_t> wire(frame, buf.data() + buf.size());
  auto d = decode_all(wire);
  REQUIRE(d.headers.size() == 1);
  CHECK(d.headers[0].stream_id == 7);
  OpenPayload open;
  std::string reason;
  REQUIRE(decode_open(d.payloads[0], &open, &reason));
  CHECK(open.target == "tcp:127.0.0.1:6379");
  CHECK(std::string(open.first_bytes.begin(), open.first_bytes.end()) == "hello");
}

TEST_CASE("OPEN carries its origin after the target when both sides offered it") {
  StreamOrigin origin;
  for (size_t i = 0; i < origin.connection.size(); ++i) origin.connection[i] = static_cast<uint8_t>(i + 1);
  origin.client = {6, {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}, 40512};
  origin.destination = {4, {10, 96, 0, 10}, 6379};
  CHECK(origin_length(origin) == 16 + 19 + 7);
  std::vector<uint8_t> buf(kBufferHeadroom + 5);
  std::memcpy(buf.data() + kBufferHeadroom, "hello", 5);
  uint8_t* frame = encode_open_before(buf.data() + kBufferHeadroom, 7, "tcp:127.0.0.1:6379", 5, &origin);
  CHECK(static_cast<size_t>(buf.data() + kBufferHeadroom - frame) == open_prefix_length("tcp:127.0.0.1:6379", &origin));
  std::vector<uint8_t> wire(frame, buf.data() + buf.size());
  auto d = decode_all(wire);
  REQUIRE(d.headers.size() == 1);
  OpenPayload open;
  std::string reason;
  REQUIRE(decode_open(d.payloads[0], &open, &reason, /*with_origin=*/true));
  CHECK(open.has_origin);
  CHECK(open.origin == origin);
  CHECK(open.target == "tcp:127.0.0.1:6379");
  CHECK(std::string(open.first_bytes.begin(), open.first_bytes.end()) == "hello");

  // A side that did not offer origins reads the origin as first bytes: so
  // it is only sent where both HELLOs carry kCapOrigin.
  REQUIRE(decode_open(d.payloads[0], &open, &reason));
  CHECK_FALSE(open.has_origin);
  CHECK(open.first_bytes.size() == 1 + origin_length(origin) + 5);

  // Unknown addresses (a Unix-socket client, no original destination) take a byte each.
  StreamOrigin unknown;
  unknown.connection.fill(9);
  CHECK(origin_length(unknown) == 18);
  frame = encode_open_before(buf.data() + kBufferHeadroom, 9, "unix:/run/x", 0, &unknown);
  wire.assign(frame, buf.data() + kBufferHeadroom);
  d = decode_all(wire);
  REQUIRE(decode_open(d.payloads[0], &open, &reason, true));
  CHECK(open.origin == unknown);
  CHECK(open.first_bytes.empty());
}

TEST_CASE("a malformed OPEN origin is refused with a reason") {
  StreamOrigin origin;
  origin.connection.fill(1);
  origin.client = {4, {127, 0, 0, 1}, 5000};
  std::vector<uint8_t> good = {3, 0, 'a', 'b', 'c'};
  good.push_back(static_cast<uint8_t>(origin_length(origin)));
  size_t at = good.size();
  good.resize(at + origin_length(origin));
  encode_origin(good.data() + at, origin);
  OpenPayload open;
  std::string reason;
  REQUIRE(decode_open(good, &open, &reason, true));
  auto refused = [&](std::vector<uint8_t> payload, const std::string& why) {
    CHECK_FALSE(decode_open(payload, &open, &reason, true));
    CHECK(reason == why);
  };
  refused({3, 0, 'a', 'b', 'c'}, "OPEN origin length 0 invalid");
  std::vector<uint8_t> longer = good;
  longer[5] = static_cast<uint8_t>(longer[5] + 1);
  refused(longer, "OPEN origin length " + std::to_string(longer[5]) + " invalid");
  std::vector<uint8_t> short_id = {3, 0, 'a', 'b', 'c', 4, 1, 2, 3, 4};
  refused(short_id, "OPEN origin without a connection id");
  std::vector<uint8_t> family = good;
  family[6 + 16] = 5;
  refused(family, "OPEN origin client of family 5");
  std::vector<uint8_t> cut = good;
  cut[5] = static_cast<uint8_t>(16 + 3);  // the client's address cut short
  refused(cut, "OPEN origin client cut short");
  std::vector<uint8_t> no_destination = good;
  no_destination[5] = static_cast<uint8_t>(no_destination[5] - 1);
  no_destination.pop_back();
  refused(no_destination, "OPEN origin without its destination");
  std::vector<uint8_t> extra = good;
  extra[5] = static_cast<uint8_t>(extra[5] + 1);
  extra.push_back(0);
  refused(extra, "OPEN origin with 1 bytes past its destination");
}

TEST_CASE("several frames back to back decode in order, split anywhere") {
  std::vector<uint8_t> wire(256);
  size_t n = 0;
  n += encode_u32_frame(wire.data() + n, FrameType::kWindow, 3, 65536);
  n += encode_empty_frame(wire.data() + n, FrameType::kFin, 3);
  n += encode_u32_frame(wire.data() + n, FrameType::kReset, 5, static_cast<uint32_t>(ResetCode::kNotAllowed));
  n += encode_u64_frame(wire.data() + n, FrameType::kPing, 0, 0x1122334455667788ull);
  encode_header(wire.data() + n, FrameType::kData, 9, 3);
  std::memcpy(wire.data() + n + kHeaderSize, "abc", 3);
  n += kHeaderSize + 3;
  wire.resize(n);
  for (size_t cut = 0; cut < n; ++cut) {
    std::vector<uint8_t> first(wire.begin(), wire.begin() + static_cast<long>(cut));
    auto d = decode_all(first);
    CHECK(d.last == FrameReader::Status::kNeedMore);
  }
  auto d = decode_all(wire);
  REQUIRE(d.headers.size() == 5);
  CHECK(d.headers[0].type == FrameType::kWindow);
  CHECK(get_u32(d.payloads[0].data()) == 65536);
  CHECK(d.headers[1].type == FrameType::kFin);
  CHECK(d.headers[2].type == FrameType::kReset);
  CHECK(get_u32(d.payloads[2].data()) == 3);
  CHECK(get_u64(d.payloads[3].data()) == 0x1122334455667788ull);
  CHECK(d.headers[4].stream_id == 9);
  CHECK(std::string(d.payloads[4].begin(), d.payloads[4].end()) == "abc");
}

TEST_CASE("decoder rejects malformed frames with a reason") {
  std::vector<uint8_t> h(kHeaderSize);
  SECTION("unknown type") {
    encode_header(h.data(), FrameType::kData, 1, 0);
    h[0] = 0x42;
    auto d = decode_all(h);
    CHECK(d.last == FrameReader::Status::kError);
    CHECK_THAT(d.reason, Catch::Contains("unknown frame type 66"));
  }
  SECTION("type zero") {
    encode_header(h.data(), FrameType::kData, 1, 0);
    h[0] = 0;
    CHECK(decode_all(h).last == FrameReader::Status::kError);
  }
  SECTION("oversized DATA") {
    encode_header(h.data(), FrameType::kData, 1, 16385);
    auto d = decode_all(h, 16384);
    CHECK(d.last == FrameReader::Status::kError);
    CHECK_THAT(d.reason, Catch::Contains("exceeds limit 16384"));
  }
  SECTION("reserved bits") {
    encode_header(h.data(), FrameType::kFin, 1, 0);
    h[2] = 1;
    CHECK(decode_all(h).last == FrameReader::Status::kError);
  }
  SECTION("flags") {
    encode_header(h.data(), FrameType::kFin, 1, 0, 0x80);
    CHECK(decode_all(h).last == FrameReader::Status::kError);
  }
  SECTION("DATA on stream 0") {
    encode_header(h.data(), FrameType::kData, 0, 0);
    CHECK(decode_all(h).last == FrameReader::Status::kError);
  }
  SECTION("PING on a stream") {
    encode_header(h.data(), FrameType::kPing, 3, 8);
    CHECK(decode_all(h).last == FrameReader::Status::kError);
  }
  SECTION("WINDOW longer than 4 bytes") {
    encode_header(h.data(), FrameType::kWindow, 1, 5);
    CHECK(decode_all(h).last == FrameReader::Status::kError);
  }
  SECTION("all 0xFF bytes") {
    std::vector<uint8_t> junk(64, 0xFF);
    CHECK(decode_all(junk).last == FrameReader::Status::kError);
  }
}

TEST_CASE("truncated frames wait for more bytes and never read past the end") {
  std::vector<uint8_t> wire(kHeaderSize + 100);
  encode_header(wire.data(), FrameType::kData, 1, 100);
  wire.resize(kHeaderSize + 99);
  CHECK(decode_all(wire).last == FrameReader::Status::kNeedMore);
}

TEST_CASE("payload decoders reject inconsistent contents") {
  std::string reason;
  SECTION("HELLO shorter than its fixed part") {
    std::vector<uint8_t> p(10);
    HelloPayload out;
    CHECK_FALSE(decode_hello(p, &out, &reason));
  }
  SECTION("HELLO with wrong version") {
    HelloPayload in;
    in.version = 99;
    in.max_data = 16384;
    in.stream_window = 65536;
    in.session_window = 1 << 20;
    std::vector<uint8_t> buf(kHeaderSize + kHelloFixedSize);
    encode_hello(buf.data(), in);
    HelloPayload out;
    CHECK_FALSE(decode_hello(std::span<const uint8_t>(buf).subspan(kHeaderSize), &out, &reason));
    CHECK_THAT(reason, Catch::Contains("version 99"));
  }
  SECTION("HELLO whose windows are smaller than its frames") {
    HelloPayload in;
    in.max_data = 16384;
    in.stream_window = 1024;
    in.session_window = 1 << 20;
    std::vector<uint8_t> buf(kHeaderSize + kHelloFixedSize);
    encode_hello(buf.data(), in);
    HelloPayload out;
    CHECK_FALSE(decode_hello(std::span<const uint8_t>(buf).subspan(kHeaderSize), &out, &reason));
  }
  SECTION("HELLO announcing absurd windows (a peer could make us queue without bound)") {
    HelloPayload in;
    in.max_data = 16384;
    in.stream_window = 65536;
    in.session_window = (1ull << 32) + 1;
    std::vector<uint8_t> buf(kHeaderSize + kHelloFixedSize);
    encode_hello(buf.data(), in);
    HelloPayload out;
    CHECK_FALSE(decode_hello(std::span<const uint8_t>(buf).subspan(kHeaderSize), &out, &reason));
    CHECK_THAT(reason, Catch::Contains("session_window 4294967297 outside 1024..4294967296"));
  }
  SECTION("OPEN whose target runs past the payload") {
    std::vector<uint8_t> p = {50, 0, 't', 'c'};
    OpenPayload out;
    CHECK_FALSE(decode_open(p, &out, &reason));
  }
  SECTION("OPEN with an empty target") {
    std::vector<uint8_t> p = {0, 0};
    OpenPayload out;
    CHECK_FALSE(decode_open(p, &out, &reason));
  }
}

// ---------------------------------------------------------------------------
// Protocol limits (common/protocol_limits.h): the decoder accepts each limit
// and refuses one past it. tests/unit/config_test.cc checks the parser side.

namespace {
HelloPayload hello(uint32_t max_data, uint32_t stream_window, uint64_t session_window, std::string node = "n") {
  HelloPayload h;
  h.max_data = max_data;
  h.stream_window = stream_window;
  h.session_window = session_window;
  h.node = std::move(node);
  return h;
}

// Encodes `in`, passes it through a receiver's stream decoder and HELLO
// decoder, as a session does.
bool hello_accepted(const HelloPayload& in, HelloPayload* out, std::string* reason) {
  std::vector<uint8_t> buf(kHeaderSize + kHelloFixedSize + in.node.size());
  REQUIRE(encode_hello(buf.data(), in) == buf.size());
  auto d = decode_all(buf);
  if (d.last == FrameReader::Status::kError) {
    *reason = d.reason;
    return false;
  }
  REQUIRE(d.headers.size() == 1);
  return decode_hello(d.payloads[0], out, reason);
}
bool hello_accepted(const HelloPayload& in, std::string* reason) {
  HelloPayload out;
  return hello_accepted(in, &out, reason);
}
}  // namespace

TEST_CASE("HELLO fields are accepted at the protocol limits and refused one past", "[limits]") {
  using rdmagw::kMaxDataMax;
  using rdmagw::kMaxDataMin;
  using rdmagw::kSessionWindowMax;
  using rdmagw::kSessionWindowMin;
  using rdmagw::kStreamWindowMax;
  using rdmagw::kStreamWindowMin;
  std::string reason;
  CHECK(hello_accepted(hello(kMaxDataMax, kStreamWindowMax, kSessionWindowMax), &reason));
  CHECK(hello_accepted(hello(kMaxDataMin, kStreamWindowMin, kSessionWindowMin), &reason));

  CHECK_FALSE(hello_accepted(hello(kMaxDataMax + 1, kStreamWindowMax, kSessionWindowMax), &reason));
  CHECK(reason == "HELLO max_data 1048577 outside 1024..1048576");
  CHECK_FALSE(hello_accepted(hello(kMaxDataMin - 1, kStreamWindowMin, kSessionWindowMin), &reason));
  CHECK(reason == "HELLO max_data 1023 outside 1024..1048576");
  CHECK_FALSE(hello_accepted(hello(kMaxDataMax, kStreamWindowMax + 1, kSessionWindowMax), &reason));
  CHECK(reason == "HELLO stream_window 67108865 outside 1024..67108864");
  CHECK_FALSE(hello_accepted(hello(kMaxDataMin, kStreamWindowMin - 1, kSessionWindowMin), &reason));
  CHECK(reason == "HELLO stream_window 1023 outside 1024..67108864");
  CHECK_FALSE(hello_accepted(hello(kMaxDataMax, kStreamWindowMax, kSessionWindowMax + 1), &reason));
  CHECK(reason == "HELLO session_window 4294967297 outside 1024..4294967296");
  CHECK_FALSE(hello_accepted(hello(kMaxDataMin, kStreamWindowMin, kSessionWindowMin - 1), &reason));
  CHECK(reason == "HELLO session_window 1023 outside 1024..4294967296");
}

TEST_CASE("HELLO carries a node name of up to 255 bytes and no more", "[limits]") {
  std::string reason;
  HelloPayload out;
  const std::string longest(rdmagw::kMaxNodeNameLength, 'n');
  REQUIRE(hello_accepted(hello(16384, 262144, 1 << 20, longest), &out, &reason));
  CHECK(out.node == longest);
  // One byte more cannot be encoded (node_len is a u8); a header announcing
  // such a HELLO is refused before its payload is read.
  std::vector<uint8_t> h(kHeaderSize);
  encode_header(h.data(), FrameType::kHello, 0, static_cast<uint32_t>(kHelloFixedSize + longest.size()));
  CHECK(decode_all(h).last == FrameReader::Status::kNeedMore);  // valid, waits for the payload
  encode_header(h.data(), FrameType::kHello, 0, static_cast<uint32_t>(kHelloFixedSize + longest.size() + 1));
  auto d = decode_all(h);
  CHECK(d.last == FrameReader::Status::kError);
  CHECK(d.reason == "HELLO payload of 281 bytes exceeds limit 280");
}

TEST_CASE("HELLO with a node name outside the rule is refused, naming the byte", "[limits]") {
  std::string reason;
  CHECK(hello_accepted(hello(16384, 262144, 1 << 20, "host-a.example_1"), &reason));
  CHECK_FALSE(hello_accepted(hello(16384, 262144, 1 << 20, "x\x1b]0;pwned\x07"), &reason));
  CHECK(reason ==
        "HELLO node name is not a node name: byte 2 is 0x1b (1 to 255 bytes of ASCII letters, digits, "
        "'.', '-' and '_')");
  CHECK_FALSE(hello_accepted(hello(16384, 262144, 1 << 20, "a b"), &reason));
  CHECK(reason.find("byte 2 is 0x20 (' ')") != std::string::npos);
  CHECK_FALSE(hello_accepted(hello(16384, 262144, 1 << 20, "caf\xc3\xa9"), &reason));
  CHECK(reason.find("byte 4 is 0xc3") != std::string::npos);
  CHECK_FALSE(hello_accepted(hello(16384, 262144, 1 << 20, ""), &reason));
  CHECK(reason.find("empty") != std::string::npos);
}

TEST_CASE("OPEN carries a target of up to 300 bytes and no more", "[limits]") {
  std::string reason;
  OpenPayload open;
  const std::string longest(rdmagw::kMaxTargetLength, 't');
  std::vector<uint8_t> buf(kBufferHeadroom + 3, 'x');
  uint8_t* frame = encode_open_before(buf.data() + kBufferHeadroom, 1, longest, 3);
  std::vector<uint8_t> wire(frame, buf.data() + buf.size());
  auto d = decode_all(wire);
  REQUIRE(d.headers.size() == 1);
  REQUIRE(decode_open(d.payloads[0], &open, &reason));
  CHECK(open.target == longest);
  CHECK(open.first_bytes.size() == 3);

  std::vector<uint8_t> payload(2 + rdmagw::kMaxTargetLength + 1, 't');
  put_u16(payload.data(), static_cast<uint16_t>(rdmagw::kMaxTargetLength + 1));
  CHECK_FALSE(decode_open(payload, &open, &reason));
  CHECK(reason == "OPEN target length 301 invalid");

  // The largest OPEN: the longest target and origin, a full max_data of first bytes.
  std::vector<uint8_t> h(kHeaderSize);
  const uint32_t largest = 2 + rdmagw::kMaxTargetLength + 1 + rdmagw::kMaxOriginLength + rdmagw::kMaxDataMax;
  encode_header(h.data(), FrameType::kOpen, 1, largest);
  CHECK(decode_all(h, rdmagw::kMaxDataMax).last == FrameReader::Status::kNeedMore);
  encode_header(h.data(), FrameType::kOpen, 1, largest + 1);
  CHECK(decode_all(h, rdmagw::kMaxDataMax).last == FrameReader::Status::kError);
}

// ---------------------------------------------------------------------------
// The property the limits exist for: whatever `rdmagw --check` accepts, the
// peer's decoder accepts in the HELLO built from it.

namespace {
// What a sidecar announces for `config`, filled in as proxy/runtime/worker.cc
// and Session::send_hello do.
HelloPayload hello_from(const rdmagw::Config& config) {
  return hello(config.tunnel.buffer_size, config.tunnel.stream_window, config.tunnel.session_budget, config.node);
}

rdmagw::ConfigResult parse_tunnel(uint64_t buffer_size, uint64_t stream_window, uint64_t session_budget,
                                  const std::string& node = "host-a") {
  std::string text = "node: " + node + "\ntunnel:\n  buffer_size: " + std::to_string(buffer_size) +
                     "\n  stream_window: " + std::to_string(stream_window) +
                     "\n  session_budget: " + std::to_string(session_budget) + "\n";
  return rdmagw::parse_config_text(text, "limits.yaml");
}
}  // namespace

TEST_CASE("a HELLO built from the largest config that --check accepts is accepted by the peer", "[limits]") {
  const std::string longest_node(rdmagw::kMaxNodeNameLength, 'n');
  auto r = parse_tunnel(rdmagw::kMaxDataMax, rdmagw::kStreamWindowMax, rdmagw::kSessionWindowMax, longest_node);
  INFO((r.errors.empty() ? "" : r.errors[0].to_string()));
  REQUIRE(r.config);
  HelloPayload out;
  std::string reason;
  bool accepted = hello_accepted(hello_from(*r.config), &out, &reason);
  INFO(reason);
  REQUIRE(accepted);
  CHECK(out.max_data == rdmagw::kMaxDataMax);
  CHECK(out.stream_window == rdmagw::kStreamWindowMax);
  CHECK(out.session_window == rdmagw::kSessionWindowMax);
  CHECK(out.node == longest_node);

  // The defect this guards against: session_budget 2^64-1 passed --check and
  // every HELLO carrying it was refused. Now --check refuses it.
  CHECK_FALSE(parse_tunnel(16384, 262144, UINT64_MAX).config);
  CHECK_FALSE(parse_tunnel(16384, 262144, rdmagw::kSessionWindowMax + 1).config);
}

TEST_CASE("config check and HELLO decoder agree on every value around the limits", "[limits]") {
  auto around = [](uint64_t min, uint64_t max, uint64_t typical) {
    return std::vector<uint64_t>{min - 1, min, min + 1, typical, max - 1, max, max + 1};
  };
  size_t accepted = 0, refused = 0;
  for (uint64_t b : around(rdmagw::kMaxDataMin, rdmagw::kMaxDataMax, 16384)) {
    for (uint64_t w : around(rdmagw::kStreamWindowMin, rdmagw::kStreamWindowMax, 262144)) {
      for (uint64_t s : around(rdmagw::kSessionWindowMin, rdmagw::kSessionWindowMax, 32u << 20)) {
        bool config_ok = parse_tunnel(b, w, s).config != nullptr;
        // Every value here fits its wire field, so the HELLO can always be built.
        std::string reason;
        bool peer_ok = hello_accepted(hello(static_cast<uint32_t>(b), static_cast<uint32_t>(w), s), &reason);
        INFO("buffer_size " << b << ", stream_window " << w << ", session_budget " << s << ": " << reason);
        CHECK(config_ok == peer_ok);
        (config_ok ? accepted : refused)++;
      }
    }
  }
  CHECK(accepted > 0);  // the sweep covers both outcomes
  CHECK(refused > 0);
}
