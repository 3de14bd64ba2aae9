// SPDX-License-Identifier: Apache-2.0
#pragma once
// One io_uring per worker thread: the ground floor every layer stands on.
//
// Every submission carries a pointer to an IoOp owned by the object that asked
// for it; its completion calls back into that object. Objects that queue
// output register as Flushable and are flushed once per batch of completions,
// so many small writes leave as one.
//
// The lifetime rule (one, for every object with I/O in flight): such objects
// derive from IoObject (io_object.h). The loop counts each one's operations in
// flight; the owner calls retire() when it is done with it, and the loop
// deletes it once retired and idle, at the end of the completion batch, never
// while a call on it is still unwinding.
#include <liburing.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "proxy/io/io_object.h"

namespace rdmagw {

struct IoOp {
  void* owner = nullptr;
  void (*fn)(void* owner, int res, uint32_t flags) = nullptr;
  // The object whose operations in flight this op counts in (see IoObject).
  IoObject* counted = nullptr;

  // IoOp::bind<&Stream::on_recv>(this) calls this->on_recv(res, flags); when
  // `this` is an IoObject, the op counts in it.
  template <auto Method, class T>
  static IoOp bind(T* self);
  // Calls self->Method but counts in `counted` (helpers embedded in an IoObject).
  template <auto Method, class T>
  static IoOp bind(T* self, IoObject* counted) {
    return IoOp{self, [](void* s, int res, uint32_t flags) { (static_cast<T*>(s)->*Method)(res, flags); }, counted};
  }
};

class EventLoop;

class Flushable {
 public:
  virtual ~Flushable();
  virtual void flush() = 0;

 private:
  friend class EventLoop;
  EventLoop* flush_loop_ = nullptr;  // set while queued, so destruction can unqueue
};

struct LoopFeatures {
  bool defer_taskrun = false;  // IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN (6.1+)
  bool coop_taskrun = false;   // IORING_SETUP_COOP_TASKRUN (5.19+)
  bool buffer_ring = false;    // socket receives pick provided buffers (5.19+, ProvidedBuffers)
  // A receive may wait for readiness before its first attempt
  // (IORING_RECVSEND_POLL_FIRST, 5.19+: known from the setup flags above,
  // which came in the same or a later release).
  bool poll_first = false;
  std::string describe() const;
};

using Clock = std::chrono::steady_clock;

// True when RDMAGW_IO_URING=baseline asks for the 5.10-era feature set.
bool baseline_io_uring_forced();

class EventLoop {
 public:
  EventLoop() = default;
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Sets up the ring with the best flags this kernel accepts and checks that
  // the opcodes rdmagw needs exist. Returns false with *error set otherwise.
  bool init(unsigned entries, std::string* error);
  const LoopFeatures& features() const { return features_; }
  void set_buffer_ring(bool on) { features_.buffer_ring = on; }

  // A submission entry; submits pending ones first if the queue is full.
  // The op counts as in flight in its IoObject until its last completion.
  io_uring_sqe* sqe(IoOp* op);
  // Ensures `count` entries can be taken without an intervening submit, so a
  // linked chain (connect + link timeout) is never split.
  void reserve(unsigned count);
  // Asks the kernel to cancel the submission tagged with `op`; its completion
  // still arrives (usually with -ECANCELED). One cancel per call: an op that
  // was submitted twice (it never is here) would need two.
  void cancel(IoOp* op);

  // A provided buffer ring (ProvidedBuffers): 0 or -errno. Unregistering is
  // a no-op once the ring has ended.
  int register_buffer_ring(io_uring_buf_reg* reg);
  void unregister_buffer_ring(uint16_t group);

  void request_flush(Flushable* f);
  void unqueue_flush(Flushable* f);

  // Runs until stop(); calls `tick` at least every `tick_interval`.
  template <class Tick>
  void run(std::chrono::milliseconds tick_interval, Tick&& tick);
  // Runs one batch: waits up to `timeout` for completions, dispatches them,
  // flushes, and deletes retired idle objects. Unit tests drive the loop by it.
  void run_once(std::chrono::nanoseconds timeout);
  void stop() { running_ = false; }
  Clock::time_point now() const { return now_; }
  // Batches run so far (each a wait for completions): how often the loop
  // woke, which an idle loop keeps to about one per tick.
  uint64_t batches() const { return batches_; }
  // Flushes and then deletes retired idle objects (the end of a batch).
  void end_batch();

  // Ends the ring (nothing is in flight afterwards) and deletes every
  // IoObject still alive, retired or not. Owners must have let go of theirs:
  // called once by the thread that owns the loop, as its last act.
  void shut_down();
  // IoObjects alive on this loop (retired ones waiting for their ops included).
  size_t live_objects() const { return live_count_; }

 private:
  friend class IoObject;
  void adopt(IoObject* object);
  void forget(IoObject* object);
  void condemn(IoObject* object);
  void wait_and_dispatch(std::chrono::nanoseconds timeout);
  void dispatch(io_uring_cqe* cqe);
  void run_flushes();
  void delete_condemned();

  io_uring ring_{};
  bool initialized_ = false;
  bool running_ = false;
  bool shut_down_ = false;
  LoopFeatures features_;
  Clock::time_point now_ = Clock::now();
  uint64_t batches_ = 0;
  std::vector<Flushable*> flush_queue_;
  std::vector<Flushable*> flushing_;
  std::vector<IoObject*> condemned_;  // retired and idle: deleted at the end of the batch
  IoObject* first_live_ = nullptr;    // every IoObject of this loop, for shut_down()
  size_t live_count_ = 0;
};

template <auto Method, class T>
IoOp IoOp::bind(T* self) {
  IoObject* counted = nullptr;
  if constexpr (std::is_base_of_v<IoObject, T>) counted = self;
  return bind<Method>(self, counted);
}

template <class Tick>
void EventLoop::run(std::chrono::milliseconds tick_interval, Tick&& tick) {
  running_ = true;
  auto next_tick = Clock::now() + tick_interval;
  while (running_) {
    // To the nanosecond: a wait cut to whole milliseconds ended up to one
    // early, and the loop then spun through zero-length waits until the
    // tick was due (1.5% of a core per idle worker).
    auto wait = std::max<std::chrono::nanoseconds>(next_tick - Clock::now(), std::chrono::nanoseconds(0));
    run_once(wait);
    if (now_ >= next_tick) {
      tick();
      end_batch();
      next_tick = now_ + tick_interval;
    }
  }
}

}  // namespace rdmagw
