// SPDX-License-Identifier: Apache-2.0
#include "common/local_addresses.h"

#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstring>

#include "common/log.h"

namespace rdmagw {

namespace {

constexpr auto kRefreshInterval = std::chrono::seconds(1);

bool same_address(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET)
    return reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in&>(b).sin_addr.s_addr;
  if (a.ss_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr,
                       &reinterpret_cast<const sockaddr_in6&>(b).sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

}  // namespace

bool LocalAddresses::contains(const Endpoint& endpoint, Clock::time_point now) {
  if (endpoint.kind != Endpoint::Kind::kTcp) return false;
  if (is_loopback(endpoint)) return true;
  if (read_ && listed(endpoint.addr)) return true;
  if (read_ && now - refreshed_ < kRefreshInterval) return false;
  refreshed_ = now;
  refresh();
  return listed(endpoint.addr);
}

bool LocalAddresses::listed(const sockaddr_storage& addr) const {
  for (const sockaddr_storage& a : addresses_)
    if (same_address(a, addr)) return true;
  return false;
}

void LocalAddresses::refresh() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    // Keep what was read before: a target this host held a second ago
    // still counts, and one it never held still does not.
    log::warn("local_addresses_unreadable").kv("error", std::strerror(errno));
    return;
  }
  read_ = true;
  addresses_.clear();
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    sockaddr_storage a{};
    std::memcpy(&a, i->ifa_addr, i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    addresses_.push_back(a);
  }
  freeifaddrs(list);
}

}  // namespace rdmagw
