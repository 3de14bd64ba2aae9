// SPDX-License-Identifier: Apache-2.0
#pragma once
// Socket options every rdmagw connection wants.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace rdmagw {

// Frames and application writes must leave at once: no Nagle delay. Harmless
// (fails quietly) on Unix sockets.
inline void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// SO_LINGER 0: close() sends RST, so the other end sees a reset rather than a
// clean EOF it could take for a complete reply. Application and target
// sockets carry this from the moment they exist, so that the kernel resets
// them even when rdmagw dies without a chance to (SIGKILL, OOM kill, abort).
inline void set_abortive_close(int fd) {
  linger lg{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
}

// Back to the default close (FIN after the queued bytes): only for a stream
// that completed in both directions.
inline void set_graceful_close(int fd) {
  linger lg{0, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
}

}  // namespace rdmagw
