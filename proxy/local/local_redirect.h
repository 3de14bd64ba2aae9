// SPDX-License-Identifier: Apache-2.0
#pragma once
// The local legs past the TCP stack: the BPF programs of
// bpf/local_redirect.bpf.c, loaded and attached to a cgroup v2 that holds
// the applications and rdmagw, so that loopback connections between them
// (on the ports rdmagw names) carry each message straight to the other
// end's receive queue. Owned by the process; every resource (the programs,
// their maps, the cgroup attachment, the shared read counters) is released
// by the destructor, which detaches everything it attached.
//
// What rdmagw does with it, per connection it holds (LocalStream):
//   - admit_reader(): the direction towards rdmagw, with a read counter
//     rdmagw advances as it reads (one store, no syscall), which bounds
//     what the writer may have redirected and unread;
//   - admit_sender(): the direction from rdmagw, which rdmagw paces itself
//     (SocketMemory says what the reader holds unread).
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "proxy/local/stream_info.h"

struct local_redirect;
struct bpf_link;

namespace rdmagw::local {

struct LocalRedirectOptions {
  std::string cgroup;                   // a cgroup v2 directory
  uint64_t max_in_flight = 256 * 1024;  // per flow: redirected and not yet read
};

// A connection's two ends as the programs key them.
struct RedirectKey {
  sockaddr_storage local{};
  sockaddr_storage remote{};
};
// The addresses of a connected socket; nullopt if it has none (it left).
std::optional<RedirectKey> redirect_key_of(int fd);

class LocalRedirect {
 public:
  // Loads and attaches; null, with why in *why, where the kernel, the
  // privileges, the cgroup or this build do not allow it.
  static std::unique_ptr<LocalRedirect> attach(const LocalRedirectOptions& options, std::string* why);
  ~LocalRedirect();
  LocalRedirect(const LocalRedirect&) = delete;
  LocalRedirect& operator=(const LocalRedirect&) = delete;

  // Connections on this port (either end) are redirected from their next
  // establishment on. False (and why) if the map is full. Any thread; a
  // port already added costs no system call.
  bool add_port(uint16_t port, std::string* why);
  void remove_port(uint16_t port);

  // A flow rdmagw reads: what `connection`'s peer sends to it. Returns the
  // counter rdmagw adds what it reads to (its own store, seen by the
  // programs); null if no slot is free or the map refused (the flow then
  // stays on TCP). Call before the first read.
  std::atomic<uint64_t>* admit_reader(const RedirectKey& connection);
  // A flow rdmagw sends on `connection`: redirected; call before the
  // first send. False if the map refused (it stays on TCP).
  bool admit_sender(const RedirectKey& connection);
  // Switches a flow admit_sender() admitted between TCP (true: the reader
  // is behind) and redirecting (false: only once the reader has read every
  // byte sent by TCP, or bytes would overtake them). False if the map
  // refused.
  bool send_by_tcp(const RedirectKey& connection, bool by_tcp);
  // The connection ends: its admissions and slot go.
  void forget(const RedirectKey& connection, std::atomic<uint64_t>* counter);

  LocalRedirectStats stats() const;
  uint64_t max_in_flight() const { return options_.max_in_flight; }

 private:
  explicit LocalRedirect(const LocalRedirectOptions& options) : options_(options) {}
  void release();

  LocalRedirectOptions options_;
  ::local_redirect* skeleton_ = nullptr;
  ::bpf_link* sockops_link_ = nullptr;
  bool msg_attached_ = false;
  UniqueFd cgroup_;
  std::atomic<uint64_t>* reads_ = nullptr;  // the shared counters, LOCAL_REDIRECT_MAX_SLOTS of them
  size_t reads_bytes_ = 0;
  std::mutex mu_;  // guards free_slots_ (workers admit from their threads)
  std::vector<uint32_t> free_slots_;
  std::atomic<uint64_t> port_bits_[65536 / 64] = {};  // ports in the ports map
};

}  // namespace rdmagw::local
