// SPDX-License-Identifier: Apache-2.0
#pragma once
// A pipe that carries payload between two sockets inside the kernel:
// splice(2) moves page references from the tunnel socket into it and from
// it into the application's socket, so the bytes never cross into user
// space (the TCP transport's large DATA payloads; docs/architecture.md,
// "Splice"). Both ends are non-blocking.
//
// Whoever is handed bytes in the pipe takes all of them out before
// returning (into a socket, a queue, or discard()), so that the pipe is
// empty between frames and its bytes never mix with the next frame's.
#include <cstddef>
#include <string>

#include "common/unique_fd.h"

namespace rdmagw {

class SplicePipe {
 public:
  SplicePipe() = default;
  // A pipe that holds at least `capacity` bytes however the socket's pages
  // fall. False (with *error) when the kernel refuses: out of descriptors,
  // or past the user's pipe budget (fs.pipe-user-pages-soft), where a pipe
  // cannot grow; the caller then copies as it would without splice.
  bool open(size_t capacity, std::string* error);
  bool is_open() const { return read_.valid(); }
  int read_end() const { return read_.get(); }
  int write_end() const { return write_.get(); }
  size_t capacity() const { return capacity_; }

  // Reads and drops `n` bytes from a pipe's read end (bytes nobody takes: a
  // stream that was reset). False when fewer were there.
  static bool discard(int read_end, size_t n);

 private:
  UniqueFd read_, write_;
  size_t capacity_ = 0;
};

}  // namespace rdmagw
