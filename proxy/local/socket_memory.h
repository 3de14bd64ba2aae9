// SPDX-License-Identifier: Apache-2.0
#pragma once
// How many bytes a TCP socket of this host holds in its receive queues, asked
// of the kernel by the connection's addresses (NETLINK_SOCK_DIAG,
// INET_DIAG_SKMEMINFO: sk_rmem_alloc). With the local legs redirected
// (local_redirect.h), what rdmagw sends an application is queued on the
// application's socket without TCP's window, and this is how rdmagw learns
// how much of it the application has not read yet. One per worker: not
// thread-safe.
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/unique_fd.h"

namespace rdmagw::local {

class SocketMemory {
 public:
  // False (and why) if the kernel has no socket diagnostics for us.
  bool open(std::string* why);
  // The receive memory of the socket whose own address is `local` and whose
  // peer is `remote` (IPv4 or IPv6; an IPv4 connection is also looked for
  // as a dual-stack socket's ::ffff:a.b.c.d). Nullopt if there is none.
  std::optional<uint64_t> receive_bytes(const sockaddr_storage& local, const sockaddr_storage& remote);

 private:
  std::optional<uint64_t> ask(int family, const sockaddr_storage& local, const sockaddr_storage& remote);
  UniqueFd netlink_;
  uint32_t sequence_ = 0;
};

}  // namespace rdmagw::local
