// SPDX-License-Identifier: Apache-2.0
#pragma once
// Listening sockets, opened by the main thread (at start and on reload) so
// that bind errors are reported once, clearly, before any worker uses them.
// A reload keeps the sockets of every address that stays, so connections
// waiting in their backlog are never lost.
#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/address.h"
#include "config/config.h"
#include "proxy/local/listener_load.h"

namespace rdmagw {

// The sockets of one listen address: one per worker for TCP (SO_REUSEPORT,
// so the kernel spreads connections) or one that all workers share (a unix
// socket cannot be reuseport). Closed, and a unix path unlinked, when the
// last holder lets go: a worker that stops accepting on it, or a reload.
class ListenFds {
 public:
  // Opens and binds; nullptr with *error ("bind: Address already in use"...).
  static std::shared_ptr<ListenFds> open(const Endpoint& endpoint, unsigned workers, std::string* error);
  // Sockets a takeover brought over, listening already (workers share them
  // round robin when their count changed).
  static std::shared_ptr<ListenFds> adopt(const Endpoint& endpoint, std::vector<int> fds, unsigned workers);
  ~ListenFds();
  ListenFds(const ListenFds&) = delete;
  ListenFds& operator=(const ListenFds&) = delete;

  int fd_for(unsigned worker) const { return fds_[worker % fds_.size()]; }
  const std::vector<int>& fds() const { return fds_; }
  // A new process took them over: closing ours must not unlink the unix
  // socket's path, which names the socket it goes on serving.
  void hand_over() { handed_over_ = true; }
  // Its connections across the workers (max_connections, accepts_per_second):
  // kept as long as the address is, across reloads.
  const std::shared_ptr<local::ListenerLoad>& load() const { return load_; }
  // The same address's count from sockets drained before these were
  // opened (POST /undrain): before any worker accepts here.
  void keep_load(std::shared_ptr<local::ListenerLoad> load) { load_ = std::move(load); }
  // Worker `worker` stops accepting here (reload removed it, or a drain):
  // its own socket stops listening at once, so connections are refused
  // rather than queued where nobody accepts. A shared socket stops when the
  // last worker lets go (earlier, the others' pending accepts would fail).
  void stop_listening(unsigned worker);

 private:
  ListenFds(Endpoint endpoint, std::vector<int> fds, unsigned workers)
      : endpoint_(std::move(endpoint)), fds_(std::move(fds)), workers_(workers) {}
  Endpoint endpoint_;
  std::vector<int> fds_;
  unsigned workers_;
  std::shared_ptr<local::ListenerLoad> load_ = std::make_shared<local::ListenerLoad>();
  std::atomic<unsigned> stopped_by_{0};  // workers that stopped accepting on a shared socket
  // The unix socket file this process bound: unlinked on close only if the
  // path still names it (a newer socket may have replaced it).
  dev_t path_dev_ = 0;
  ino_t path_ino_ = 0;
  std::atomic<bool> handed_over_{false};
};

// One configured listener and its sockets.
struct ListenerSocket {
  ListenerConfig config;
  std::shared_ptr<ListenFds> fds;
};
using ListenerSet = std::vector<std::shared_ptr<const ListenerSocket>>;

// Sockets for every listener of `config`; those whose address (and
// transparent flag) is unchanged from `current` are reused, not reopened.
// On failure returns false with *key ("listeners[1].listen") and *error set;
// nothing of `current` is touched.
bool open_listener_set(const Config& config, const ListenerSet& current, ListenerSet* out, std::string* key,
                       std::string* error);

// Whether nothing listens on a TCP endpoint yet: checked before the first
// of a group of SO_REUSEPORT sockets is bound, which would otherwise join
// another process's listener and split its connections.
bool claim_tcp_port(const Endpoint& endpoint, std::string* error);
// One listening TCP socket (SO_REUSEADDR, and SO_REUSEPORT when asked), or -1.
int open_listening_socket(const Endpoint& endpoint, bool reuseport, std::string* error);

}  // namespace rdmagw
