// SPDX-License-Identifier: Apache-2.0
// The takeover channel's messages (proxy/runtime/takeover_channel.h) as a
// process at the other end could send them: the bytes go into one end of a
// socket pair, and the other end reads messages until one is refused or the
// bytes end. Every header (magic, type, payload length, socket count) is
// checked before its payload is read, and a payload grows only as its bytes
// arrive: a length of gigabytes must not be allocated up front.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "proxy/runtime/takeover_channel.h"

using namespace rdmagw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return 0;
  UniqueFd reader(pair[0]), writer(pair[1]);
  int buffer = 1 << 20;  // the whole input fits: the writer never blocks
  setsockopt(writer.get(), SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  setsockopt(reader.get(), SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
  size_t at = 0;
  while (at < size) {
    ssize_t n = ::send(writer.get(), data + at, size - at, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) return 0;
    at += static_cast<size_t>(n);
  }
  writer.reset();  // the end of the bytes: a read past them fails at once
  for (int i = 0; i < 1000; ++i) {
    TakeoverMessageIn m;
    std::string error;
    if (!receive_takeover_message(reader.get(), &m, &error)) {
      if (error.empty()) __builtin_trap();  // a refusal always says why
      break;
    }
    if (m.payload.size() > size) __builtin_trap();  // more than was sent
  }
  return 0;
}
