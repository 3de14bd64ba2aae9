// SPDX-License-Identifier: Apache-2.0
#pragma once
// Accepts connections on a listening socket through io_uring. Uses multishot
// accept where the kernel has it (5.19+) and falls back to one accept per
// connection otherwise, so the same binary runs on 5.10.
#include <sys/socket.h>

#include <functional>
#include <string>

#include "common/unique_fd.h"
#include "proxy/io/event_loop.h"

namespace rdmagw {

class Acceptor final : public IoObject {
 public:
  using Handler = std::function<void(UniqueFd fd)>;
  // Does not own `listen_fd` (it may be shared by several workers).
  Acceptor(EventLoop& loop, int listen_fd, std::string name, Handler handler);

  void start();
  // Stops accepting (cancels the pending accept). An owner that lets go of
  // the acceptor (IoPtr) stops it first; it is freed once the accept completes.
  void stop();
  // Stops accepting for a takeover: the listening socket goes on in another
  // process. A connection accepted meanwhile still reaches the handler (it
  // moves with the others) instead of being reset.
  void hand_over() {
    keep_late_ = true;
    stop();
  }
  // Re-arms after a resource error (EMFILE...) without spinning on it.
  void tick();
  // A reload renamed the listener (logs use the name).
  void rename(std::string name) { name_ = std::move(name); }

 private:
  ~Acceptor() override = default;
  void arm();
  void on_accept(int res, uint32_t flags);

  int listen_fd_;
  std::string name_;
  Handler handler_;
  IoOp op_;
  bool armed_ = false;
  bool stopping_ = false;
  bool keep_late_ = false;
  bool multishot_ = true;
  unsigned consecutive_errors_ = 0;
  bool rearm_on_tick_ = false;
};

}  // namespace rdmagw
