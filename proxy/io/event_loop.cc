// SPDX-License-Identifier: Apache-2.0
#include "proxy/io/event_loop.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace rdmagw {

std::string LoopFeatures::describe() const {
  std::string out = defer_taskrun ? "single-issuer,defer-taskrun" : coop_taskrun ? "coop-taskrun" : "basic";
  if (buffer_ring) out += ",buffer-ring";
  if (poll_first) out += ",poll-first";
  return out;
}

EventLoop::~EventLoop() { shut_down(); }

namespace {
thread_local bool t_sweeping = false;
}  // namespace

bool IoObject::sweeping() { return t_sweeping; }

IoObject::IoObject(EventLoop& loop) : loop_(loop) { loop_.adopt(this); }

IoObject::~IoObject() { loop_.forget(this); }

void IoObject::retire() {
  if (retired_) return;
  retired_ = true;
  if (in_flight_ == 0) loop_.condemn(this);
}

void EventLoop::adopt(IoObject* object) {
  object->next_live_ = first_live_;
  if (first_live_) first_live_->prev_live_ = object;
  first_live_ = object;
  ++live_count_;
}

void EventLoop::forget(IoObject* object) {
  if (object->prev_live_)
    object->prev_live_->next_live_ = object->next_live_;
  else
    first_live_ = object->next_live_;
  if (object->next_live_) object->next_live_->prev_live_ = object->prev_live_;
  --live_count_;
}

void EventLoop::condemn(IoObject* object) {
  if (object->condemned_) return;
  object->condemned_ = true;
  condemned_.push_back(object);
}

void EventLoop::delete_condemned() {
  // A destructor may retire what the object owned: loop until none is left.
  while (!condemned_.empty()) {
    std::vector<IoObject*> batch;
    batch.swap(condemned_);
    for (IoObject* object : batch) {
      if (object->in_flight_ > 0) {
        // Submitted after it was retired: it waits for that op after all;
        // dispatch() condemns it again when the last one completes.
        object->condemned_ = false;
        continue;
      }
      delete object;
    }
  }
}

void EventLoop::end_batch() {
  run_flushes();
  delete_condemned();
}

void EventLoop::shut_down() {
  if (shut_down_) return;
  shut_down_ = true;
  // Exiting the ring ends every operation in flight (the kernel cancels
  // them), so no completion can reach an object deleted below.
  if (initialized_) io_uring_queue_exit(&ring_);
  initialized_ = false;
  condemned_.clear();
  flush_queue_.clear();
  flushing_.clear();
  t_sweeping = true;
  while (first_live_) delete first_live_;  // each unlinks itself
  t_sweeping = false;
}

bool baseline_io_uring_forced() {
  // RDMAGW_IO_URING=baseline makes this kernel behave like 5.10 as far as
  // rdmagw can tell (no setup flags, no multishot accept), so that the
  // fallback path is exercised by tests on machines with newer kernels.
  const char* v = getenv("RDMAGW_IO_URING");
  return v && std::string(v) == "baseline";
}

bool EventLoop::init(unsigned entries, std::string* error) {
  // Newest flags first; each older kernel rejects the flags it lacks with
  // EINVAL, and we retry with less.
  const unsigned attempts[] = {
      IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
      IORING_SETUP_COOP_TASKRUN,
      0,
  };
  int rc = -EINVAL;
  for (unsigned flags : attempts) {
    if (baseline_io_uring_forced() && flags != 0) continue;
    io_uring_params params{};
    params.flags = flags;
    rc = io_uring_queue_init_params(entries, &ring_, &params);
    if (rc == 0) {
      features_.defer_taskrun = (flags & IORING_SETUP_DEFER_TASKRUN) != 0;
      features_.coop_taskrun = (flags & IORING_SETUP_COOP_TASKRUN) != 0;
      features_.poll_first = features_.defer_taskrun || features_.coop_taskrun;
      break;
    }
    if (rc != -EINVAL) break;
  }
  if (rc != 0) {
    *error = std::string("io_uring_queue_init: ") + strerror(-rc);
    return false;
  }
  initialized_ = true;

  std::unique_ptr<io_uring_probe, void (*)(io_uring_probe*)> probe(io_uring_get_probe_ring(&ring_),
                                                                   io_uring_free_probe);
  if (!probe) {
    *error = "io_uring probe failed (kernel older than 5.6?)";
    return false;
  }
  struct Needed {
    int op;
    const char* name;
  };
  // All of these exist since 5.6; Alibaba Cloud Linux 3 (5.10) has them.
  const Needed needed[] = {{IORING_OP_ACCEPT, "accept"},   {IORING_OP_CONNECT, "connect"},
                           {IORING_OP_RECV, "recv"},       {IORING_OP_SEND, "send"},
                           {IORING_OP_SENDMSG, "sendmsg"}, {IORING_OP_ASYNC_CANCEL, "cancel"}};
  for (const auto& n : needed) {
    if (!io_uring_opcode_supported(probe.get(), n.op)) {
      *error = std::string("io_uring lacks opcode ") + n.name;
      return false;
    }
  }
  flush_queue_.reserve(1024);
  flushing_.reserve(1024);
  return true;
}

io_uring_sqe* EventLoop::sqe(IoOp* op) {
  if (shut_down_) {
    // Only a destructor run by shut_down() could ask; nothing may be submitted.
    fprintf(stderr, "rdmagw: fatal: submission after the event loop shut down\n");
    abort();
  }
  io_uring_sqe* s = io_uring_get_sqe(&ring_);
  // A full SQ is submitted to make room. Submission can fail transiently
  // (EBUSY while the CQ overflows on old kernels); retry a bounded number of
  // times, then treat it as the broken invariant it is.
  for (int attempt = 0; !s && attempt < 1000; ++attempt) {
    int rc = io_uring_submit(&ring_);
    if (rc < 0 && rc != -EBUSY && rc != -EAGAIN && rc != -EINTR) break;
    s = io_uring_get_sqe(&ring_);
  }
  if (!s) {
    fprintf(stderr, "rdmagw: fatal: io_uring submission queue stuck full\n");
    abort();
  }
  io_uring_sqe_set_data(s, op);
  if (op && op->counted) ++op->counted->in_flight_;
  return s;
}

void EventLoop::reserve(unsigned count) {
  // Linked operations must land in the same submission: make room first.
  if (io_uring_sq_space_left(&ring_) < count) io_uring_submit(&ring_);
}

void EventLoop::cancel(IoOp* op) {
  io_uring_sqe* s = sqe(nullptr);  // not counted: its completion carries no op
  io_uring_prep_cancel(s, op, 0);
  io_uring_sqe_set_data(s, nullptr);
}

int EventLoop::register_buffer_ring(io_uring_buf_reg* reg) {
  if (!initialized_) return -EBADF;
  return io_uring_register_buf_ring(&ring_, reg, 0);
}

void EventLoop::unregister_buffer_ring(uint16_t group) {
  if (initialized_) io_uring_unregister_buf_ring(&ring_, group);
}

Flushable::~Flushable() {
  if (flush_loop_) flush_loop_->unqueue_flush(this);
}

void EventLoop::request_flush(Flushable* f) {
  if (f->flush_loop_) return;
  f->flush_loop_ = this;
  flush_queue_.push_back(f);
}

void EventLoop::unqueue_flush(Flushable* f) {
  // Rare (an object dying with output queued): a linear scan is fine.
  for (auto* q : {&flush_queue_, &flushing_}) {
    for (auto& entry : *q)
      if (entry == f) entry = nullptr;
  }
  f->flush_loop_ = nullptr;
}

void EventLoop::run_flushes() {
  // A flush may queue further flushes (a session writing a window update
  // after a stream drained); loop until quiet.
  while (!flush_queue_.empty()) {
    flushing_.swap(flush_queue_);
    for (size_t i = 0; i < flushing_.size(); ++i) {
      Flushable* f = flushing_[i];
      if (!f) continue;
      f->flush_loop_ = nullptr;
      f->flush();
    }
    flushing_.clear();
  }
}

void EventLoop::run_once(std::chrono::nanoseconds timeout) {
  ++batches_;
  end_batch();
  wait_and_dispatch(timeout);
  end_batch();
}

void EventLoop::dispatch(io_uring_cqe* cqe) {
  auto* op = static_cast<IoOp*>(io_uring_cqe_get_data(cqe));
  if (!op) return;  // a cancel request's own completion
  int res = cqe->res;
  uint32_t flags = cqe->flags;
  // Read before the call: the handler may rebind or resubmit the op.
  IoObject* counted = op->counted;
  op->fn(op->owner, res, flags);
  // A multishot operation stays in flight while the kernel says MORE.
  if (counted && !(flags & IORING_CQE_F_MORE)) {
    if (--counted->in_flight_ == 0 && counted->retired_) condemn(counted);
  }
}

void EventLoop::wait_and_dispatch(std::chrono::nanoseconds timeout) {
  __kernel_timespec ts{};
  ts.tv_sec = timeout.count() / 1000000000;
  ts.tv_nsec = timeout.count() % 1000000000;
  io_uring_cqe* cqe = nullptr;
  int rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
  if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
    // Only a broken ring gets here (EBADF, EFAULT, EINVAL): nothing this
    // worker does can work any more. Say so instead of spinning silently.
    fprintf(stderr, "rdmagw: fatal: io_uring_submit_and_wait: %s\n", strerror(-rc));
    abort();
  }
  now_ = Clock::now();
  // Drain everything that is ready, then flush once for the whole batch.
  for (int round = 0; round < 4; ++round) {
    unsigned head;
    unsigned count = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++count;
      // Before 5.11 (no IORING_FEAT_EXT_ARG) liburing implements the wait
      // timeout with an SQE of its own; its completion is not ours.
      if (cqe->user_data == LIBURING_UDATA_TIMEOUT) continue;
      dispatch(cqe);
    }
    if (count == 0) break;
    io_uring_cq_advance(&ring_, count);
    if (io_uring_cq_ready(&ring_) == 0) break;
  }
}

}  // namespace rdmagw
