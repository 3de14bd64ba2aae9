// SPDX-License-Identifier: Apache-2.0
#include "common/splice_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rdmagw {

bool SplicePipe::open(size_t capacity, std::string* error) {
  int fds[2];
  if (::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    *error = std::string("pipe2: ") + strerror(errno);
    return false;
  }
  UniqueFd r(fds[0]), w(fds[1]);
  // A spliced socket page fills one pipe slot however few bytes of it are
  // payload, so the pipe gets twice the bytes it must hold, in pages.
  long page = ::sysconf(_SC_PAGESIZE);
  size_t want = 2 * capacity + static_cast<size_t>(page);
  int got = ::fcntl(w.get(), F_SETPIPE_SZ, static_cast<int>(want));
  // Beyond fs.pipe-max-size (1 MiB by default) only CAP_SYS_RESOURCE may
  // go: take the most allowed; larger frames are then copied.
  constexpr size_t kDefaultMaxPipe = 1 << 20;
  if (got < 0 && errno == EPERM && want > kDefaultMaxPipe)
    got = ::fcntl(w.get(), F_SETPIPE_SZ, static_cast<int>(kDefaultMaxPipe));
  if (got < 0) {
    *error = std::string("fcntl(F_SETPIPE_SZ, ") + std::to_string(want) + "): " + strerror(errno);
    return false;
  }
  read_ = std::move(r);
  write_ = std::move(w);
  capacity_ = static_cast<size_t>(got) / 2;
  return true;
}

bool SplicePipe::discard(int read_end, size_t n) {
  char sink[4096];
  while (n > 0) {
    ssize_t got = ::read(read_end, sink, n < sizeof sink ? n : sizeof sink);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      return false;
    }
    n -= static_cast<size_t>(got);
  }
  return true;
}

}  // namespace rdmagw
