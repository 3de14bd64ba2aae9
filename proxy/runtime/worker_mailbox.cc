// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/worker_mailbox.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace rdmagw {

bool WorkerMailbox::init(std::string* error) {
  // Blocking on purpose: io_uring then waits for the counter by polling it,
  // where a non-blocking eventfd could complete the read with EAGAIN.
  int fd = eventfd(0, EFD_CLOEXEC);
  if (fd < 0) {
    *error = std::string("eventfd: ") + strerror(errno);
    return false;
  }
  event_fd_.reset(fd);
  op_ = IoOp::bind<&WorkerMailbox::on_wakeup>(this);
  return true;
}

bool WorkerMailbox::post(Task task) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    tasks_.push_back(std::move(task));
  }
  uint64_t one = 1;
  // The counter cannot realistically overflow (2^64 - 2 posts unread).
  [[maybe_unused]] ssize_t n = ::write(event_fd_.get(), &one, sizeof(one));
  return true;
}

void WorkerMailbox::start(EventLoop& loop) {
  loop_ = &loop;
  arm();
}

void WorkerMailbox::arm() {
  io_uring_sqe* s = loop_->sqe(&op_);
  io_uring_prep_read(s, event_fd_.get(), &counter_, sizeof(counter_), 0);
}

void WorkerMailbox::on_wakeup(int res, uint32_t) {
  std::vector<Task> tasks;
  {
    std::lock_guard lock(mu_);
    tasks.swap(tasks_);
    if (closed_) return;
  }
  for (auto& t : tasks) {
    // A task that throws (bad_alloc building an answer) must not take the
    // worker, and every stream on it, down with it.
    try {
      t();
    } catch (const std::exception& e) {
      log::error("mailbox_task_failed").kv("reason", e.what());
    }
  }
  if (res < 0 && res != -EINTR && res != -EAGAIN) {
    // Not expected from an eventfd; re-arming could spin. Posted tasks are
    // then never run, and whoever waits for them times out and says so.
    log::error("mailbox_failed").kv("error", strerror(-res));
    return;
  }
  arm();
}

void WorkerMailbox::close() {
  std::vector<Task> dropped;
  std::lock_guard lock(mu_);
  closed_ = true;
  dropped.swap(tasks_);
}

}  // namespace rdmagw
