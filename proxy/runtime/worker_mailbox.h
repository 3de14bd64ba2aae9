// SPDX-License-Identifier: Apache-2.0
#pragma once
// Work handed to a worker by other threads (the admin thread, the main
// thread on reload). Tasks run on the worker's own thread between loop
// batches, so they may touch anything the worker owns without a lock. The
// worker is woken through an eventfd its io_uring reads.
#include <functional>
#include <mutex>
#include <vector>

#include "common/unique_fd.h"
#include "proxy/io/event_loop.h"

namespace rdmagw {

class WorkerMailbox {
 public:
  using Task = std::function<void()>;

  WorkerMailbox() = default;
  WorkerMailbox(const WorkerMailbox&) = delete;
  WorkerMailbox& operator=(const WorkerMailbox&) = delete;

  bool init(std::string* error);
  // Any thread. False once the worker stopped taking tasks (the task is dropped).
  bool post(Task task);
  // Worker thread: start reading the eventfd on `loop`.
  void start(EventLoop& loop);
  // Worker thread, after its loop ended: refuse further tasks.
  void close();

 private:
  void arm();
  void on_wakeup(int res, uint32_t flags);

  std::mutex mu_;
  std::vector<Task> tasks_;
  bool closed_ = false;
  UniqueFd event_fd_;
  EventLoop* loop_ = nullptr;
  IoOp op_;
  uint64_t counter_ = 0;  // the eventfd read lands here
};

}  // namespace rdmagw
