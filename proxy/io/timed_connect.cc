#include "proxy/io/timed_connect.h"

#include <cerrno>

namespace rdmagw {

void TimedConnect::start(EventLoop& loop, int fd, const sockaddr_storage& addr, socklen_t len,
                         uint32_t timeout_ms) {
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
  done_(owner_, error);
}

}  // namespace rdmagw
