// SPDX-License-Identifier: Apache-2.0
#include "proxy/local/stream_origin.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

namespace rdmagw::local {

tunnel::OriginAddress origin_address(const sockaddr* address, socklen_t length) {
  tunnel::OriginAddress out;
  if (address->sa_family == AF_INET && length >= sizeof(sockaddr_in)) {
    auto* in = reinterpret_cast<const sockaddr_in*>(address);
    out.family = 4;
    std::memcpy(out.address.data(), &in->sin_addr, 4);
    out.port = ntohs(in->sin_port);
  } else if (address->sa_family == AF_INET6 && length >= sizeof(sockaddr_in6)) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(address);
    out.port = ntohs(in6->sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      out.family = 4;
      std::memcpy(out.address.data(), in6->sin6_addr.s6_addr + 12, 4);
    } else {
      out.family = 6;
      std::memcpy(out.address.data(), in6->sin6_addr.s6_addr, 16);
    }
  }
  return out;
}

std::string origin_address_text(const tunnel::OriginAddress& address) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (address.family == 4) {
    inet_ntop(AF_INET, address.address.data(), buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(address.port);
  }
  if (address.family == 6) {
    inet_ntop(AF_INET6, address.address.data(), buf, sizeof(buf));
    return "[" + std::string(buf) + "]:" + std::to_string(address.port);
  }
  return {};
}

}  // namespace rdmagw::local
