// SPDX-License-Identifier: Apache-2.0
#include "proxy/io/acceptor.h"

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/socket_options.h"

namespace rdmagw {

namespace {
// Learned once per process: every ring runs on the same kernel.
std::atomic<bool> g_multishot_accept{true};
}  // namespace

Acceptor::Acceptor(EventLoop& loop, int listen_fd, std::string name, Handler handler)
    : IoObject(loop), listen_fd_(listen_fd), name_(std::move(name)), handler_(std::move(handler)) {
  op_ = IoOp::bind<&Acceptor::on_accept>(this);
  multishot_ = g_multishot_accept.load(std::memory_order_relaxed) && !baseline_io_uring_forced();
}

void Acceptor::start() { arm(); }

void Acceptor::arm() {
  if (stopping_) return;
  io_uring_sqe* s = loop().sqe(&op_);
  if (multishot_)
    io_uring_prep_multishot_accept(s, listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  else
    io_uring_prep_accept(s, listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  armed_ = true;
}

void Acceptor::stop() {
  if (stopping_) return;
  stopping_ = true;
  if (armed_) loop().cancel(&op_);
}

void Acceptor::on_accept(int res, uint32_t flags) {
  bool more = multishot_ && (flags & IORING_CQE_F_MORE);
  if (!more) armed_ = false;
  if (res >= 0) {
    consecutive_errors_ = 0;
    if (stopping_ && !keep_late_) {
      // Accepted as we stopped: never served, so the client must see a
      // reset, not a clean EOF it could take for an answer.
      set_abortive_close(res);
      ::close(res);
    } else {
      handler_(UniqueFd(res));
    }
  } else if (res == -EINVAL && multishot_ && !stopping_) {
    // Kernel without multishot accept: fall back for good.
    multishot_ = false;
    g_multishot_accept.store(false, std::memory_order_relaxed);
    log::info("accept_fallback").kv("listener", name_).kv("reason", "multishot accept unsupported");
  } else if (res != -ECANCELED && !stopping_) {
    // EMFILE and friends: the connection stays in the backlog, so an
    // immediate re-arm would fail again at once. Retry on the next tick.
    if (++consecutive_errors_ <= 3 || consecutive_errors_ % 100 == 0)
      log::warn("accept_failed").kv("listener", name_).kv("error", strerror(-res));
    if (!armed_) {
      rearm_on_tick_ = true;
      return;
    }
  }
  if (!armed_ && !stopping_) arm();
}

void Acceptor::tick() {
  if (rearm_on_tick_ && !armed_ && !stopping_) {
    rearm_on_tick_ = false;
    arm();
  }
}

}  // namespace rdmagw
