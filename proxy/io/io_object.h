// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one lifetime rule for objects with I/O in flight (io_uring operations,
// RDMA work requests, frames in a transport): they derive from IoObject.
//
// - The event loop counts each object's operations in flight (every IoOp
//   bound to it counts from submission to its last completion).
// - Its owner calls retire() when done with it (an IoPtr does so on reset or
//   destruction). Before that the object should have stopped its I/O
//   (cancelled what it had submitted); retire() itself submits nothing.
// - The loop deletes a retired object once none of its operations is in
//   flight, at the end of the current completion batch: never inside a call
//   on it, so no callback has to ask "am I still alive?".
// No other code deletes an IoObject.
#include <cstddef>
#include <memory>
#include <utility>

namespace rdmagw {

class EventLoop;

class IoObject {
 public:
  IoObject(const IoObject&) = delete;
  IoObject& operator=(const IoObject&) = delete;

  // The owner lets go. Idempotent.
  void retire();
  // True while EventLoop::shut_down() deletes what is left on this thread:
  // owners' handles then let go without touching their objects, which the
  // sweep may have deleted already.
  static bool sweeping();
  bool retired() const { return retired_; }
  unsigned ops_in_flight() const { return in_flight_; }
  EventLoop& loop() const { return loop_; }

 protected:
  explicit IoObject(EventLoop& loop);
  // Runs at the end of a batch (or at EventLoop::shut_down()): it must not
  // submit I/O or call into other IoObjects, which may be gone already then.
  virtual ~IoObject();

 private:
  friend class EventLoop;
  EventLoop& loop_;
  unsigned in_flight_ = 0;
  bool retired_ = false;
  bool condemned_ = false;
  IoObject* prev_live_ = nullptr;  // the loop's list of live objects
  IoObject* next_live_ = nullptr;
};

struct IoRetire {
  void operator()(IoObject* object) const {
    if (!IoObject::sweeping()) object->retire();
  }
};
// Owning handle: dropping it retires the object (deleted once idle).
template <class T>
using IoPtr = std::unique_ptr<T, IoRetire>;

template <class T, class... Args>
IoPtr<T> make_io(Args&&... args) {
  return IoPtr<T>(new T(std::forward<Args>(args)...));
}

}  // namespace rdmagw
