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

}  // namespace rdmagw
