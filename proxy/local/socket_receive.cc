// SPDX-License-Identifier: Apache-2.0
#include "proxy/local/socket_receive.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/protocol_limits.h"

namespace rdmagw::local {

void SocketReceive::post(StreamHost& host, IoOp* op, int fd, uint32_t len) {
  len_ = len;
  io_uring_sqe* s = host.loop.sqe(op);
  ProvidedBuffers* ring = host.receive_ring;
  if (ring && ring->active() && !ring_dry_) {
    by_poll_ = false;
    io_uring_prep_recv(s, fd, nullptr, len, 0);
    // The last receive emptied the socket: the next one would most likely
    // find nothing at first, and only then wait. Waiting first saves that
    // attempt, which request-response traffic makes on every receive.
    if (drained_ && host.loop.features().poll_first) s->ioprio |= IORING_RECVSEND_POLL_FIRST;
    ring->select_for(s);
  } else {
    by_poll_ = true;
    ring_dry_ = false;
    io_uring_prep_poll_add(s, fd, POLLIN);  // POLLERR and POLLHUP come too
  }
}

int SocketReceive::finish(StreamHost& host, int fd, int res, uint32_t flags, bool read, uint8_t** buffer) {
  *buffer = nullptr;
  if (!by_poll_) {
    // Any completion may carry a buffer (even one with no bytes): take it.
    if (host.receive_ring) *buffer = host.receive_ring->take(flags);
    if (res == -ENOBUFS) ring_dry_ = true;
    drained_ = res == -EAGAIN || (res > 0 && static_cast<uint32_t>(res) < len_);
    return res;
  }
  if (res < 0 || !read) return res;
  // Readable, hung up or in error: the read says which.
  *buffer = host.pool.acquire();
  if (!*buffer) return -ENOMEM;
  ssize_t n = ::recv(fd, *buffer + kBufferHeadroom, len_, MSG_DONTWAIT);
  return n >= 0 ? static_cast<int>(n) : -errno;
}

}  // namespace rdmagw::local
