// SPDX-License-Identifier: Apache-2.0
#pragma once
// One application connection's two flows through the local redirect
// (local_redirect.h, docs/architecture.md "Local legs"): the flow rdmagw
// reads, which the programs bound by the read counter advanced here, and
// the flow rdmagw sends, which rdmagw paces here by what the application
// has not read yet:
//   - rdmagw asks the kernel what the application holds unread
//     (SocketMemory), and may then send max_in_flight less that before it
//     asks again; within an eighth of max_in_flight the flow goes by TCP
//     instead, whose window then paces rdmagw as it always has. So the
//     redirected bytes the application has not read stay under
//     max_in_flight, and a reader that keeps up costs one question per
//     max_in_flight sent.
//   - by TCP, at most once a millisecond before a send, rdmagw checks that
//     its socket has nothing unacknowledged and the application nothing
//     unread; only then does the flow redirect again, so that no byte
//     overtakes one sent by TCP.
// Owned by the connection's LocalStream; not thread-safe (one worker).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "proxy/local/connection_image.h"
#include "proxy/local/local_redirect.h"
#include "proxy/local/socket_memory.h"

namespace rdmagw::local {

// What a worker's connections share to redirect their legs.
struct LegRedirector {
  LocalRedirect& redirect;
  SocketMemory memory;  // this worker's socket diagnostics
};

// Once, after LocalRedirect::attach(): a loopback connection of rdmagw's
// own, admitted like a stream's, must be redirected and its unread bytes
// seen by SocketMemory. False (and why) when rdmagw is not in the cgroup it
// attached to, or the kernel does not charge redirected bytes to the
// reader (before 6.13 and 6.12.8): rdmagw could not bound what it sends.
bool probe_redirect(LocalRedirect& redirect, std::string* why);

// The new process of a takeover, before any worker admits a connection:
// the read counter `image` names is taken out of the free ones. False if
// it is out of range or named twice (the image is then not used).
bool claim_leg_slot(LocalRedirect& redirect, const RedirectedLegImage& image);

class RedirectedLeg {
 public:
  // Admits the loopback connection on `fd` (both flows); null if it is not
  // one, or the maps refused it (it stays on TCP). Call before the first
  // read or send on `fd`.
  static std::unique_ptr<RedirectedLeg> admit(LegRedirector& redirector, int fd);
  // A takeover: what the new process needs besides the maps, and the leg
  // rebuilt there from it on the same socket (its read counter's slot
  // claimed beforehand, claim_leg_slot()). Null if the image has no leg.
  RedirectedLegImage image() const;
  static std::unique_ptr<RedirectedLeg> restore(LegRedirector& redirector, const RedirectedLegImage& image);
  ~RedirectedLeg();
  RedirectedLeg(const RedirectedLeg&) = delete;
  RedirectedLeg& operator=(const RedirectedLeg&) = delete;

  // rdmagw read `n` more bytes from the socket (one store the programs see).
  void read(uint64_t n) {
    read_ += n;
    if (counter_) counter_->store(read_, std::memory_order_release);
  }
  // Before a send on `fd`: switches the flow to or from TCP as the
  // application's unread bytes say, and returns how many bytes the send
  // may carry (at least 1).
  size_t before_send(int fd);
  // A send on the socket took `n` bytes.
  void sent(uint64_t n) { budget_ -= std::min(budget_, n); }

  bool sending_by_tcp() const { return by_tcp_; }

 private:
  RedirectedLeg(LegRedirector& redirector, const RedirectKey& key) : redirector_(redirector), key_(key) {}

  LegRedirector& redirector_;
  RedirectKey key_;
  std::atomic<uint64_t>* counter_ = nullptr;  // null: the read flow stays on TCP
  uint64_t read_ = 0;
  bool sender_ = false;  // the send flow was admitted
  bool by_tcp_ = false;
  uint64_t budget_ = 0;  // bytes that may still be redirected before the application's unread bytes are asked
  std::chrono::steady_clock::time_point last_check_{};
};

}  // namespace rdmagw::local
