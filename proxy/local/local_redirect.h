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
struct bpf_map;

namespace rdmagw::local {

struct LocalRedirectOptions {
  std::string cgroup;                   // a cgroup v2 directory
  uint64_t max_in_flight = 256 * 1024;  // per flow: redirected and not yet read
  // Connects by this uid, or this gid, are never captured (rdmagw's own);
  // 0: none. With both 0 set_captures() refuses any rule.
  uint32_t exempt_uid = 0;
  uint32_t exempt_gid = 0;
};

// An IPv4 destination range whose TCP connects go to a transparent
// listener on 127.0.0.1:to_port at connect() (cgroup/connect4), past NAT.
struct ConnectCapture {
  uint32_t address = 0;  // network order, masked
  uint32_t mask = 0;     // network order
  uint16_t port_lo = 0;
  uint16_t port_hi = 65535;
  uint16_t to_port = 0;
};
inline constexpr size_t kMaxConnectCaptures = 64;

// A connection's two ends as the programs key them.
struct RedirectKey {
  sockaddr_storage local{};
  sockaddr_storage remote{};
};
// The addresses of a connected socket; nullopt if it has none (it left).
std::optional<RedirectKey> redirect_key_of(int fd);

// What a takeover moves to the new process (docs/operations.md,
// "Takeover"): the maps, which hold the connections it inherits and the
// bytes counted for them, and the cgroup attachment, so that no connection
// leaves them between two processes.
struct LocalRedirectHandover {
  uint32_t layout = 0;        // the maps' layout (LOCAL_REDIRECT_LAYOUT) in the process that made them
  std::string cgroup;         // where its programs are attached
  std::vector<UniqueFd> fds;  // the programs' cgroup links, then the maps (local_redirect.cc)
};

class LocalRedirect {
 public:
  // Loads and attaches; null, with why in *why, where the kernel, the
  // privileges, the cgroup or this build do not allow it.
  static std::unique_ptr<LocalRedirect> attach(const LocalRedirectOptions& options, std::string* why);
  // The new process of a takeover: loads this build's programs on the maps
  // `handover` brought, attaching nothing yet (the old process still
  // serves: take_charge() once it has let go). Null, with why, if the maps
  // are not what this build's programs expect, or the cgroup differs.
  static std::unique_ptr<LocalRedirect> adopt(const LocalRedirectOptions& options, LocalRedirectHandover handover,
                                              std::string* why);
  // After adopt(), once the old process let go: this build's programs
  // replace the old ones (sock_ops on the cgroup link, sk_msg on the map;
  // sockets already in the map keep the program they were added with,
  // which shares these maps). False with why if the kernel refused: the old
  // programs then stay, on the same maps.
  bool take_charge(std::string* why);
  // The old process of a takeover: what moves (borrowed; kept open until
  // this is destroyed), the layout, and from hand_over() on nothing is
  // detached when this is destroyed, as the new process carries on with it.
  std::vector<int> handover_fds() const;
  static uint32_t layout();
  void hand_over() { handed_over_.store(true, std::memory_order_release); }
  ~LocalRedirect();
  LocalRedirect(const LocalRedirect&) = delete;
  LocalRedirect& operator=(const LocalRedirect&) = delete;

  // The destinations whose connects go straight to a transparent listener
  // (replacing the last set; at most kMaxConnectCaptures). False, with
  // why, where rdmagw has no uid or gid of its own to exempt (root:root:
  // its own connects would be captured too) or the map refused.
  bool set_captures(const std::vector<ConnectCapture>& captures, std::string* why);
  // Where the connection whose client end is `client` meant to go, if it
  // was captured at connect(); taken out (rdmagw asks once, at accept).
  std::optional<sockaddr_storage> take_destination(const sockaddr_storage& client);

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
  // The connection ends: its admissions and slot go (unless handed over:
  // then the new process carries the connection on in the same maps).
  void forget(const RedirectKey& connection, std::atomic<uint64_t>* counter);

  // A takeover's read counters: the slot a counter is (for the image),
  // and, in the new process, the counter of a slot the image names, taken
  // out of the free ones before any worker admits (null if out of range or
  // taken already).
  uint32_t slot_of(const std::atomic<uint64_t>* counter) const { return static_cast<uint32_t>(counter - reads_); }
  std::atomic<uint64_t>* claim_slot(uint32_t slot);
  std::atomic<uint64_t>* counter(uint32_t slot) const { return &reads_[slot]; }

  LocalRedirectStats stats() const;
  uint64_t max_in_flight() const { return options_.max_in_flight; }

 private:
  explicit LocalRedirect(const LocalRedirectOptions& options) : options_(options) {}
  void release();
  void set_rodata();  // before the programs load
  void init_slots();
  std::vector<::bpf_map*> maps() const;  // in the order a takeover sends them
  template <typename Fail>
  bool map_reads(Fail* fail);  // the read counters, shared with the programs

  LocalRedirectOptions options_;
  ::local_redirect* skeleton_ = nullptr;
  // sock_ops, connect4, getpeername4, on the cgroup (local_redirect.cc's kLinks).
  static constexpr size_t kLinkCount = 3;
  ::bpf_link* links_[kLinkCount] = {};
  UniqueFd adopted_links_[kLinkCount];  // a takeover's: the old process's, this process's programs once in charge
  bool msg_attached_ = false;
  std::atomic<bool> handed_over_{false};  // read by forget(), on the workers' threads
  UniqueFd cgroup_;
  std::atomic<uint64_t>* reads_ = nullptr;  // the shared counters, LOCAL_REDIRECT_MAX_SLOTS of them
  size_t reads_bytes_ = 0;
  std::mutex mu_;                     // guards free_slots_ and slot_used_ (workers admit from their threads)
  std::vector<uint32_t> free_slots_;  // may hold slots claim_slot() took: admit_reader() skips them
  std::vector<uint8_t> slot_used_;
  std::atomic<uint64_t> port_bits_[65536 / 64] = {};  // ports in the ports map
};

}  // namespace rdmagw::local
