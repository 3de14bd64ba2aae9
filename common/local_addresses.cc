// SPDX-License-Identifier: Apache-2.0
#include "common/local_addresses.h"

#include <ifaddrs.h>
#include <net/if.h>
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
  // Read again at most once a second, hit or miss: an address that left
  // the interfaces stops counting within a second, and a failing
  // getifaddrs is tried (and logged) no more often.
  if (!tried_ || now - refreshed_ >= kRefreshInterval) {
    tried_ = true;
    refreshed_ = now;
    refresh();
  }
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
  addresses_.clear();
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    // Only interfaces that are up: IPVS kube-proxy parks every ClusterIP on
    // kube-ipvs0, down, and a host-network rdmagw must not take those for
    // its own (they lead to other hosts).
    if (!(i->ifa_flags & IFF_UP)) continue;
    sockaddr_storage a{};
    std::memcpy(&a, i->ifa_addr, i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    addresses_.push_back(a);
  }
  freeifaddrs(list);
}

}  // namespace rdmagw
