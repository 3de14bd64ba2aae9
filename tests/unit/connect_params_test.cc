// SPDX-License-Identifier: Apache-2.0
// RDMA CM private data between rdmagw processes (connect_params.h): what a
// dialer names, what a listener accepts, and what it refuses.
#include "proxy/transport/rdma/connect_params.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

using namespace rdmagw;
using namespace rdmagw::transport;

TEST_CASE("connect params: without a session, 12 bytes that round-trip") {
  uint8_t buf[kConnectParamsMaxSize];
  size_t n = encode_connect_params(buf, {64, 16392, std::nullopt});
  REQUIRE(n == kConnectParamsSize);
  ConnectParams out;
  const char* reason = "";
  REQUIRE(decode_connect_params(buf, n, &out, &reason));
  CHECK(out.recv_depth == 64);
  CHECK(out.buffer_size == 16392);
  CHECK(!out.session);
}

TEST_CASE("connect params: a dialer that names a session sends its token, which the listener reads") {
  uint8_t buf[kConnectParamsMaxSize];
  tunnel::SessionToken token{0x1122334455667788ull, 0x99aabbccddeeff00ull};
  size_t n = encode_connect_params(buf, {32, 16392, token});
  REQUIRE(n == kConnectParamsMaxSize);
  ConnectParams out;
  const char* reason = "";
  REQUIRE(decode_connect_params(buf, n, &out, &reason));
  REQUIRE(out.session);
  CHECK(*out.session == token);
  // A listener that reads only the first 12 bytes (an older rdmagw) sees valid parameters.
  REQUIRE(decode_connect_params(buf, kConnectParamsSize, &out, &reason));
  CHECK(!out.session);
}

TEST_CASE("connect params: anything else is refused, with a reason") {
  uint8_t buf[kConnectParamsMaxSize];
  ConnectParams out;
  const char* reason = "";
  size_t n = encode_connect_params(buf, {64, 16392, std::nullopt});
  CHECK(!decode_connect_params(nullptr, 0, &out, &reason));
  CHECK(!decode_connect_params(buf, n - 1, &out, &reason));
  CHECK(std::strcmp(reason, "no rdmagw parameters") == 0);
  buf[0] ^= 1;
  CHECK(!decode_connect_params(buf, n, &out, &reason));
  encode_connect_params(buf, {2, 16392, std::nullopt});
  CHECK(!decode_connect_params(buf, n, &out, &reason));
  CHECK(std::strstr(reason, "recv_depth") != nullptr);
  encode_connect_params(buf, {64, 100, std::nullopt});
  CHECK(!decode_connect_params(buf, n, &out, &reason));
  CHECK(std::strstr(reason, "buffer_size") != nullptr);
  // Flags without the session bit: no session, whatever follows.
  tunnel::SessionToken token{1, 2};
  n = encode_connect_params(buf, {64, 16392, token});
  std::memset(buf + 12, 0, 4);
  REQUIRE(decode_connect_params(buf, n, &out, &reason));
  CHECK(!out.session);
}
