// SPDX-License-Identifier: Apache-2.0
// The takeover channel's messages (proxy/runtime/takeover_channel.h) over a
// real Unix socket pair: sockets travel with the header and stay usable.
#include "proxy/runtime/takeover_channel.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

using namespace rdmagw;

TEST_CASE("takeover channel: a message carries its payload and its sockets", "[takeover]") {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  UniqueFd a(sv[0]), b(sv[1]);
  int p[2];
  REQUIRE(pipe(p) == 0);
  UniqueFd read_end(p[0]), write_end(p[1]);
  std::vector<uint8_t> payload(300000);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 13);
  std::string error;
  // The payload is larger than the socket buffer: the reader runs alongside.
  TakeoverMessageIn in;
  bool received = false;
  std::thread reader([&] { received = receive_takeover_message(b.get(), &in, &error); });
  REQUIRE(send_takeover_message(a.get(), TakeoverMessage::kImage, payload, {write_end.get()}, &error));
  reader.join();
  REQUIRE(received);
  CHECK(in.type == TakeoverMessage::kImage);
  CHECK(in.payload == payload);
  REQUIRE(in.fds.size() == 1);
  // The socket that came over is the same pipe.
  REQUIRE(write(in.fds[0].get(), "x", 1) == 1);
  char c = 0;
  REQUIRE(read(read_end.get(), &c, 1) == 1);
  CHECK(c == 'x');
  CHECK(fcntl(in.fds[0].get(), F_GETFD) & FD_CLOEXEC);
}

TEST_CASE("takeover channel: garbage and a closed channel are errors with a reason", "[takeover]") {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  UniqueFd a(sv[0]), b(sv[1]);
  std::string error;
  TakeoverMessageIn in;
  std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  REQUIRE(write(a.get(), junk.data(), junk.size()) == static_cast<ssize_t>(junk.size()));
  CHECK_FALSE(receive_takeover_message(b.get(), &in, &error));
  CHECK(error.find("bad magic") != std::string::npos);
  a.reset();
  error.clear();
  UniqueFd drained = std::move(b);
  char buf[64];
  while (read(drained.get(), buf, sizeof(buf)) > 0) {
  }
  CHECK_FALSE(receive_takeover_message(drained.get(), &in, &error));
  CHECK(error.find("closed") != std::string::npos);
}
