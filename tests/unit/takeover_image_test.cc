// SPDX-License-Identifier: Apache-2.0
// The takeover image (proxy/runtime/takeover_image.h): what the old process
// writes, the new one reads back exactly; and what a broken or hostile
// writer sends is refused with a reason, never trusted.
#include "proxy/runtime/takeover_image.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace rdmagw;

namespace {

ProcessImage sample() {
  ProcessImage p;
  p.instance = 0x1122334455667788ull;
  p.fd_count = 7;
  p.listeners.push_back({"tcp:127.0.0.1:8080", false, {0, 1}});
  p.listeners.push_back({"unix:/run/app.sock", false, {2}});
  p.tunnel_fds = {3};
  WorkerImage w;
  tunnel::SessionImage s;
  s.dialer = true;
  s.peer_label = "host-b";
  s.peer_node = "host-b";
  s.peer_hello.max_data = 16384;
  s.peer_hello.stream_window = 262144;
  s.peer_hello.session_window = 1 << 25;
  s.peer_hello.node = "host-b";
  s.own_max_data = 32768;
  s.own_stream_window = 262144;
  s.own_session_window = 1 << 25;
  s.own_capabilities = tunnel::kCapResume | tunnel::kCapOrigin;
  s.token = {7, 9};
  s.received = 1000;
  s.ack_sent = 900;
  s.frames_base = 500;
  s.peer_acked = 600;
  s.frames = std::vector<uint8_t>(300, 0xab);
  s.next_local_id = 11;
  s.session_receive_size = 1 << 25;
  s.session_receive_remaining = (1 << 25) - 100;
  s.session_receive_pending = 40;
  s.blocked = {3, 5};
  w.sessions.push_back(s);
  local::LocalStreamImage st;
  st.fd = 4;
  st.session = 0;
  st.opened = true;
  st.listener = "web";
  st.peer = "host-b";
  st.target = "tcp:10.0.0.1:80";
  st.to_socket = {1, 2, 3};
  st.parked = {4, 5};
  st.tunnel.id = 3;
  st.tunnel.receive_size = 262144;
  st.tunnel.receive_remaining = 262000;
  st.tunnel.receive_pending = 44;
  st.leg.present = true;
  st.leg.key = std::vector<uint8_t>(local::kRedirectedLegKeySize, 0x7f);
  st.leg.slot = 65535;
  st.leg.sender = true;
  st.leg.by_tcp = true;
  tunnel::StreamOrigin origin;
  origin.connection.fill(0x5a);
  origin.client = {4, {10, 0, 0, 9}, 40512};
  st.origin.resize(tunnel::origin_length(origin));
  tunnel::encode_origin(st.origin.data(), origin);
  st.client = "10.0.0.9:40512";
  st.remote = "tcp:10.0.0.9:41000";
  w.connections.streams.push_back(st);
  local::PipeImage pipe;
  pipe.client_fd = 5;
  pipe.server_fd = 6;
  pipe.listener = "mesh";
  pipe.destination = "10.0.0.2:443";
  pipe.up = {9, 9};
  w.connections.pipes.push_back(pipe);
  p.workers.push_back(w);
  return p;
}

bool decodes(const std::vector<uint8_t>& bytes, std::string* error) {
  ProcessImage out;
  return decode_process_image(bytes.data(), bytes.size(), &out, error);
}

}  // namespace

TEST_CASE("takeover image: what is written reads back the same", "[takeover]") {
  std::vector<uint8_t> bytes = encode_process_image(sample());
  ProcessImage out;
  std::string error;
  REQUIRE(decode_process_image(bytes.data(), bytes.size(), &out, &error));
  CHECK(out.instance == 0x1122334455667788ull);
  REQUIRE(out.listeners.size() == 2);
  CHECK(out.listeners[1].endpoint == "unix:/run/app.sock");
  CHECK(out.listeners[0].fds == std::vector<uint32_t>{0, 1});
  CHECK(out.tunnel_fds == std::vector<uint32_t>{3});
  REQUIRE(out.workers.size() == 1);
  const auto& s = out.workers[0].sessions.at(0);
  CHECK(s.token == tunnel::SessionToken{7, 9});
  CHECK(s.frames == std::vector<uint8_t>(300, 0xab));
  CHECK(s.peer_hello.node == "host-b");
  CHECK(s.own_max_data == 32768);
  CHECK(s.own_stream_window == 262144);
  CHECK(s.own_session_window == 1u << 25);
  CHECK(s.blocked == std::vector<uint32_t>{3, 5});
  const auto& st = out.workers[0].connections.streams.at(0);
  CHECK(st.session == 0);
  CHECK(st.to_socket == std::vector<uint8_t>{1, 2, 3});
  CHECK(st.parked == std::vector<uint8_t>{4, 5});
  CHECK(st.tunnel.receive_pending == 44);
  CHECK(st.leg.present);
  CHECK(st.leg.key == std::vector<uint8_t>(local::kRedirectedLegKeySize, 0x7f));
  CHECK(st.leg.slot == 65535);
  CHECK(st.leg.sender);
  CHECK(st.leg.by_tcp);
  CHECK(s.own_capabilities == (tunnel::kCapResume | tunnel::kCapOrigin));
  tunnel::StreamOrigin origin;
  REQUIRE(tunnel::decode_origin(st.origin, &origin, &error));
  CHECK(origin.connection[15] == 0x5a);
  CHECK(origin.client.port == 40512);
  CHECK(st.client == "10.0.0.9:40512");
  CHECK(st.destination.empty());
  CHECK(st.remote == "tcp:10.0.0.9:41000");
  CHECK(out.workers[0].connections.pipes.at(0).destination == "10.0.0.2:443");
  CHECK(encode_process_image(out) == bytes);
}

TEST_CASE("takeover image: version 2 (before redirected legs) is read; its streams have none", "[takeover]") {
  std::vector<uint8_t> bytes = encode_process_image(sample(), 2);
  // A leg: present, the key's length and bytes, the slot, two flags.
  CHECK(bytes.size() + 1 + 8 + local::kRedirectedLegKeySize + 4 + 2 == encode_process_image(sample(), 3).size());
  ProcessImage out;
  std::string error;
  REQUIRE(decode_process_image(bytes.data(), bytes.size(), &out, &error));
  const auto& st = out.workers.at(0).connections.streams.at(0);
  CHECK_FALSE(st.leg.present);
  CHECK(st.leg.slot == -1);
  CHECK(st.parked == std::vector<uint8_t>{4, 5});
}

TEST_CASE("takeover image: version 3 (before origins) is read; its sessions say no origins", "[takeover]") {
  std::vector<uint8_t> bytes = encode_process_image(sample(), 3);
  ProcessImage out;
  std::string error;
  REQUIRE(decode_process_image(bytes.data(), bytes.size(), &out, &error));
  // An old process's HELLO did not offer origins: the session must not use them.
  CHECK(out.workers.at(0).sessions.at(0).own_capabilities == 0);
  const auto& st = out.workers.at(0).connections.streams.at(0);
  CHECK(st.origin.empty());
  CHECK(st.client.empty());
  CHECK(st.leg.present);
}

TEST_CASE("takeover image: a stream's origin that does not decode is refused", "[takeover]") {
  ProcessImage p = sample();
  p.workers[0].connections.streams[0].origin.push_back(0);  // a byte past its destination
  std::string error;
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK_THAT(error, Catch::Matchers::Contains("a stream's origin: OPEN origin with 1 bytes past its destination"));
}

TEST_CASE("takeover image: a stream still connecting keeps its PROXY header; no other stream has one", "[takeover]") {
  ProcessImage p = sample();
  auto& st = p.workers[0].connections.streams[0];
  st.connecting = true;
  st.proxy_header = std::vector<uint8_t>(28, 0x0d);
  std::vector<uint8_t> bytes = encode_process_image(p);
  ProcessImage out;
  std::string error;
  REQUIRE(decode_process_image(bytes.data(), bytes.size(), &out, &error));
  CHECK(out.workers[0].connections.streams[0].proxy_header == std::vector<uint8_t>(28, 0x0d));
  st.connecting = false;
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK_THAT(error, Catch::Matchers::Contains("a PROXY header for a stream no longer connecting"));
  st.connecting = true;
  st.proxy_header.resize(65);
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK_THAT(error, Catch::Matchers::Contains("a PROXY header of 65 bytes"));
}

TEST_CASE("takeover image: a redirected leg that no leg could be is refused", "[takeover]") {
  auto refused = [](auto change, const std::string& why) {
    ProcessImage p = sample();
    change(p.workers[0].connections.streams[0].leg);
    std::vector<uint8_t> bytes = encode_process_image(p);
    std::string error;
    CHECK_FALSE(decodes(bytes, &error));
    CHECK_THAT(error, Catch::Matchers::Contains(why));
  };
  refused([](local::RedirectedLegImage& l) { l.key.resize(10); }, "a redirected leg's key of 10 bytes");
  refused([](local::RedirectedLegImage& l) { l.slot = 65536; }, "a redirected leg's read counter 65536");
  refused([](local::RedirectedLegImage& l) { l.slot = -2; }, "a redirected leg's read counter");
  refused([](local::RedirectedLegImage& l) { l.sender = false; }, "sends by TCP without sending");
  refused(
      [](local::RedirectedLegImage& l) {
        l.present = false;
        l.key.clear();
      },
      "a stream without a leg says how it goes");
}

TEST_CASE("takeover image: an older rdmagw's version 1 is read; its sessions' own settings are unknown", "[takeover]") {
  std::vector<uint8_t> bytes = encode_process_image(sample(), kOldestTakeoverImageVersion);
  CHECK(bytes.size() + 16 == encode_process_image(sample(), 2).size());  // the three values of one session
  ProcessImage out;
  std::string error;
  REQUIRE(decode_process_image(bytes.data(), bytes.size(), &out, &error));
  const auto& s = out.workers.at(0).sessions.at(0);
  CHECK(s.own_max_data == 0);
  CHECK(s.own_stream_window == 0);
  CHECK(s.own_session_window == 0);
  CHECK(s.frames == std::vector<uint8_t>(300, 0xab));
  CHECK(out.workers[0].connections.streams.at(0).tunnel.receive_pending == 44);
  // A version from the future, or 0, is refused with both ends named.
  for (uint32_t v : {0u, kTakeoverImageVersion + 1}) {
    std::vector<uint8_t> other = encode_process_image(sample());
    for (int i = 0; i < 4; ++i) other[static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
    CHECK_FALSE(decodes(other, &error));
    CHECK(error.find("image version " + std::to_string(v) + ", this rdmagw reads versions 1 to 4") !=
          std::string::npos);
  }
}

TEST_CASE("takeover image: a session's own settings outside the protocol's limits are refused", "[takeover]") {
  ProcessImage p = sample();
  p.workers[0].sessions[0].own_max_data = 512;  // below kMaxDataMin
  std::string error;
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK(error.find("session settings out of the protocol's limits") != std::string::npos);
  p = sample();
  p.workers[0].sessions[0].own_stream_window = 16384;  // below its max_data
  CHECK_FALSE(decodes(encode_process_image(p), &error));
}

// A forged image could name one socket in two places (a listener and a
// stream, say): one owner would close it under the other.
TEST_CASE("takeover image: a socket named twice, or an absurd socket count, is refused", "[takeover]") {
  std::string error;
  ProcessImage p = sample();
  p.workers[0].connections.pipes[0].server_fd = 0;  // listener 0's socket
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK(error == "socket index 0 named twice");
  p = sample();
  p.tunnel_fds = {3, 3};
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK(error == "socket index 3 named twice");
  p = sample();
  p.fd_count = 0xffffffffu;  // would be a 4 GiB table
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK(error == "implausible count of sockets: 4294967295");
}

TEST_CASE("takeover image: every truncation is refused", "[takeover]") {
  std::vector<uint8_t> bytes = encode_process_image(sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string error;
    std::vector<uint8_t> part(bytes.begin(), bytes.begin() + static_cast<long>(n));
    INFO("length " << n);
    CHECK_FALSE(decodes(part, &error));
    CHECK_FALSE(error.empty());
  }
  std::string error;
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  CHECK_FALSE(decodes(longer, &error));
  CHECK(error == "bytes after the image");
}

TEST_CASE("takeover image: any single corrupted byte is refused or read safely", "[takeover]") {
  // Under ASan (CI) this walks every field's bounds checks.
  std::vector<uint8_t> bytes = encode_process_image(sample());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0x7f}, uint8_t{0xff}}) {
      std::vector<uint8_t> bad = bytes;
      bad[i] = v;
      std::string error;
      ProcessImage out;
      if (!decode_process_image(bad.data(), bad.size(), &out, &error)) CHECK_FALSE(error.empty());
    }
  }
}

TEST_CASE("takeover image: indexes and windows that do not hold are refused", "[takeover]") {
  std::string error;
  ProcessImage p = sample();
  p.workers[0].connections.streams[0].fd = 6;
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK(error.find("socket index 6") != std::string::npos);

  p = sample();
  p.workers[0].connections.streams[0].session = 1;
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK(error.find("names session 1") != std::string::npos);

  p = sample();
  p.workers[0].sessions[0].session_receive_pending = 1 << 25;
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK(error.find("receive window") != std::string::npos);

  p = sample();
  p.workers[0].sessions[0].peer_acked = 900;  // beyond the 300 kept bytes from 500
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK(error.find("acknowledged") != std::string::npos);

  p = sample();
  p.listeners[0].fds = {9};
  CHECK_FALSE(decodes(encode_process_image(p), &error));
}

TEST_CASE("takeover image: stream flags that are no stream state are refused", "[takeover]") {
  std::string error;
  ProcessImage p = sample();
  auto& s = p.workers[0].connections.streams[0];
  s.session = -1;
  s.opened = false;
  s.connecting = true;  // a target's connect without a stream id
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK(error == "a stream connecting to its target without a stream id");

  p = sample();
  p.workers[0].connections.streams[0].write_shut = true;  // shut towards the socket before the peer's FIN
  p.workers[0].connections.streams[0].remote_fin = false;
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK(error == "a stream shut towards its socket without the peer's FIN");

  p = sample();
  REQUIRE(p.workers[0].connections.streams[0].session >= 0);
  p.workers[0].connections.streams[0].remote_fin = true;  // the session's record says otherwise
  p.workers[0].connections.streams[0].tunnel.fin_received = false;
  CHECK_FALSE(decodes(encode_process_image(p), &error));
  CHECK(error == "a stream whose FIN from the peer differs from its session's record");

  p = sample();
  p.workers[0].connections.streams[0].remote_fin = true;
  p.workers[0].connections.streams[0].tunnel.fin_received = true;
  p.workers[0].connections.streams[0].write_shut = true;
  CHECK(decodes(encode_process_image(p), &error));
}
