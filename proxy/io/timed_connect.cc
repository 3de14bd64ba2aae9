// SPDX-License-Identifier: Apache-2.0
#include "proxy/io/timed_connect.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

namespace rdmagw {

void TimedConnect::start(EventLoop& loop, int fd, const sockaddr_storage& addr, socklen_t len, uint32_t timeout_ms) {
  addr_ = addr;
  len_ = len;
  timeout_.tv_sec = timeout_ms / 1000;
  timeout_.tv_nsec = (timeout_ms % 1000) * 1000000LL;
  pending_ = true;
  cancelled_ = false;
  loop.reserve(2);
  io_uring_sqe* c = loop.sqe(&connect_op_);
  io_uring_prep_connect(c, fd, reinterpret_cast<const sockaddr*>(&addr_), len_);
  c->flags |= IOSQE_IO_LINK;
  io_uring_sqe* t = loop.sqe(&timeout_op_);
  io_uring_prep_link_timeout(t, &timeout_, 0);
}

void TimedConnect::wait(EventLoop& loop, int fd, uint32_t timeout_ms) {
  timeout_.tv_sec = timeout_ms / 1000;
  timeout_.tv_nsec = (timeout_ms % 1000) * 1000000LL;
  pending_ = true;
  cancelled_ = false;
  waited_fd_ = fd;
  loop.reserve(2);
  io_uring_sqe* c = loop.sqe(&connect_op_);
  io_uring_prep_poll_add(c, fd, POLLOUT);  // POLLERR and POLLHUP are always reported too
  c->flags |= IOSQE_IO_LINK;
  io_uring_sqe* t = loop.sqe(&timeout_op_);
  io_uring_prep_link_timeout(t, &timeout_, 0);
}

void TimedConnect::cancel(EventLoop& loop) {
  if (!pending_ || cancelled_) return;
  cancelled_ = true;
  loop.cancel(&connect_op_);
}

void TimedConnect::on_connect(int res, uint32_t) {
  pending_ = false;
  if (cancelled_) return;
  // The link timeout cancels the connect: ECANCELED means time ran out.
  int error = res >= 0 ? 0 : res == -ECANCELED ? ETIMEDOUT : -res;
  if (waited_fd_ >= 0 && res >= 0) {
    // The poll says the connect ended; SO_ERROR says how.
    socklen_t len = sizeof(error);
    if (getsockopt(waited_fd_, SOL_SOCKET, SO_ERROR, &error, &len) != 0) error = errno;
  }
  waited_fd_ = -1;
  done_(owner_, error);
}

}  // namespace rdmagw
