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

// ::ffff:a.b.c.d as a.b.c.d: a peer may name this host's IPv4 address in
// IPv6 form (the kernel connects it to the same address), so the two must
// compare equal, or a check of "this host's own ports" would let it by.
sockaddr_storage unmapped(const sockaddr_storage& a) {
  const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
  if (a.ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) return a;
  sockaddr_storage out{};
  auto& in = reinterpret_cast<sockaddr_in&>(out);
  in.sin_family = AF_INET;
  in.sin_port = in6.sin6_port;
  std::memcpy(&in.sin_addr, &in6.sin6_addr.s6_addr[12], sizeof(in.sin_addr));
  return out;
}

bool same_address(const sockaddr_storage& mapped_a, const sockaddr_storage& mapped_b) {
  const sockaddr_storage a = unmapped(mapped_a), b = unmapped(mapped_b);
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
