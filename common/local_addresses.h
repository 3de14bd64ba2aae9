// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <vector>

#include "common/address.h"

namespace rdmagw {

// The addresses of this host's (or pod's) interfaces, for targets written
// `tcp:self:PORT`: a pod's address is not known when its configuration is
// written, so such a target admits PORT on whichever address the interfaces
// that are up hold. Read with getifaddrs() at most once a second, so a
// stream open costs a short scan, not a netlink dump, and an address that
// left counts no more after a second. One per worker: not thread-safe.
class LocalAddresses {
 public:
  using Clock = std::chrono::steady_clock;

  // Whether `endpoint` is a TCP endpoint on an address of this host:
  // loopback, or an address an interface that is up holds (as of the last
  // read, at most a second ago).
  bool contains(const Endpoint& endpoint, Clock::time_point now = Clock::now());

 private:
  bool listed(const sockaddr_storage& addr) const;
  void refresh();

  std::vector<sockaddr_storage> addresses_;
  Clock::time_point refreshed_{};
  bool tried_ = false;
};

}  // namespace rdmagw
