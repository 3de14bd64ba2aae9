// SPDX-License-Identifier: Apache-2.0
#pragma once
// Connects a non-blocking socket with a deadline: an io_uring connect linked
// to a link-timeout, so the kernel cancels the connect when time runs out.
// The one connect-with-timeout of rdmagw (tunnel dials, target and
// passthrough connections). Embedded in an IoObject, whose operations in
// flight its two ops count in.
#include <linux/time_types.h>
#include <sys/socket.h>

#include <cstdint>

#include "proxy/io/event_loop.h"

namespace rdmagw {

class TimedConnect {
 public:
  // `done(owner, error)` gets 0 on success, else an errno (ETIMEDOUT when
  // the deadline passed). It is not called after cancel() for a cancelled
  // attempt, only the ops' completions are counted.
  template <auto Method, class T>
  void bind(T* owner) {
    owner_ = owner;
    done_ = [](void* o, int error) { (static_cast<T*>(o)->*Method)(error); };
    connect_op_ = IoOp::bind<&TimedConnect::on_connect>(this, owner);
    timeout_op_ = IoOp::bind<&TimedConnect::on_timeout>(this, owner);
  }

  void start(EventLoop& loop, int fd, const sockaddr_storage& addr, socklen_t len, uint32_t timeout_ms);
  // Waits, with the same deadline, for a connect the kernel is already
  // making on `fd` (another process started it: a takeover).
  void wait(EventLoop& loop, int fd, uint32_t timeout_ms);
  void cancel(EventLoop& loop);
  bool pending() const { return pending_; }

 private:
  void on_connect(int res, uint32_t flags);
  void on_timeout(int, uint32_t) {}

  void* owner_ = nullptr;
  void (*done_)(void* owner, int error) = nullptr;
  IoOp connect_op_, timeout_op_;
  sockaddr_storage addr_{};  // the kernel reads it until the connect completes
  socklen_t len_ = 0;
  __kernel_timespec timeout_{};
  bool pending_ = false;
  bool cancelled_ = false;
  int waited_fd_ = -1;  // wait(): the op is a poll for POLLOUT on it
};

}  // namespace rdmagw
