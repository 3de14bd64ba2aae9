#pragma once
// One io_uring per worker thread. Every submission carries a pointer to an
// IoOp owned by the object that asked for it; completions call back into that
// object. Objects that queue output register as Flushable and are flushed
// once per batch of completions, so many small writes leave as one.
#include <liburing.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace rdmagw {

struct IoOp {
  void* owner = nullptr;
  void (*fn)(void* owner, int res, uint32_t flags) = nullptr;

  // IoOp::bind<&Stream::on_recv>(this) calls this->on_recv(res, flags).
  template <auto Method, class T>
  static IoOp bind(T* self) {
    return IoOp{self, [](void* s, int res, uint32_t flags) { (static_cast<T*>(s)->*Method)(res, flags); }};
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

  // A submission entry; submits pending ones first if the queue is full.
  io_uring_sqe* sqe(IoOp* op);
  // Ensures `count` entries can be taken without an intervening submit, so a
  // linked chain (connect + link timeout) is never split.
  void reserve(unsigned count);
  // Cancels every pending submission tagged with `op` (result ignored).
  void cancel(IoOp* op);

  void request_flush(Flushable* f);
  void unqueue_flush(Flushable* f);

  // Runs until stop(); calls `tick` at least every `tick_interval`.
  template <class Tick>
  void run(std::chrono::milliseconds tick_interval, Tick&& tick);
  void stop() { running_ = false; }
  Clock::time_point now() const { return now_; }

 private:
  void wait_and_dispatch(std::chrono::milliseconds timeout);
  void run_flushes();

  io_uring ring_{};
  bool initialized_ = false;
  bool running_ = false;
  LoopFeatures features_;
  Clock::time_point now_ = Clock::now();
  std::vector<Flushable*> flush_queue_;
  std::vector<Flushable*> flushing_;
};

template <class Tick>
void EventLoop::run(std::chrono::milliseconds tick_interval, Tick&& tick) {
  running_ = true;
  auto next_tick = Clock::now() + tick_interval;
  while (running_) {
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - Clock::now());
    if (wait.count() < 0) wait = std::chrono::milliseconds(0);
    wait_and_dispatch(wait);
    now_ = Clock::now();
    if (now_ >= next_tick) {
      tick();
      run_flushes();
      next_tick = now_ + tick_interval;
    }
  }
}

}  // namespace rdmagw
