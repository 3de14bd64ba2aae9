// SPDX-License-Identifier: Apache-2.0
#include "proxy/local/socket_memory.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rdmagw::local {

namespace {

// An address and port as inet_diag wants them (network order); false for a
// family it cannot take.
bool fill(int family, const sockaddr_storage& in, __be32 out[4], __be16* port) {
  std::memset(out, 0, 4 * sizeof(__be32));
  if (in.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(in);
    *port = a.sin_port;
    if (family == AF_INET) {
      out[0] = a.sin_addr.s_addr;
    } else {  // as a dual-stack socket sees it: ::ffff:a.b.c.d
      out[2] = htonl(0xffff);
      out[3] = a.sin_addr.s_addr;
    }
    return true;
  }
  if (in.ss_family == AF_INET6 && family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(in);
    *port = a.sin6_port;
    std::memcpy(out, &a.sin6_addr, 16);
    return true;
  }
  return false;
}

}  // namespace

bool SocketMemory::open(std::string* why) {
  netlink_ = UniqueFd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!netlink_.valid()) {
    *why = std::string("socket(NETLINK_SOCK_DIAG): ") + strerror(errno);
    return false;
  }
  // A slow answer must not stall a worker: bounded, and rare (see callers).
  timeval timeout{0, 100 * 1000};
  ::setsockopt(netlink_.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return true;
}

std::optional<uint64_t> SocketMemory::receive_bytes(const sockaddr_storage& local, const sockaddr_storage& remote) {
  if (local.ss_family == AF_INET6) return ask(AF_INET6, local, remote);
  if (auto bytes = ask(AF_INET, local, remote)) return bytes;
  return ask(AF_INET6, local, remote);
}

std::optional<uint64_t> SocketMemory::ask(int family, const sockaddr_storage& local, const sockaddr_storage& remote) {
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  message.header.nlmsg_len = sizeof(message);
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST;  // one socket, by its exact addresses
  message.header.nlmsg_seq = ++sequence_;
  message.request.sdiag_family = static_cast<uint8_t>(family);
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_states = ~0u;
  message.request.idiag_ext = 1 << (INET_DIAG_SKMEMINFO - 1);
  message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  if (!fill(family, local, message.request.id.idiag_src, &message.request.id.idiag_sport) ||
      !fill(family, remote, message.request.id.idiag_dst, &message.request.id.idiag_dport))
    return std::nullopt;
  if (::send(netlink_.get(), &message, sizeof(message), 0) != static_cast<ssize_t>(sizeof(message)))
    return std::nullopt;
  alignas(nlmsghdr) char answer[1024];
  for (int attempt = 0; attempt < 4; ++attempt) {
    ssize_t n = ::recv(netlink_.get(), answer, sizeof(answer), 0);
    if (n < 0) return std::nullopt;
    for (auto* h = reinterpret_cast<nlmsghdr*>(answer); NLMSG_OK(h, static_cast<unsigned>(n)); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_seq != sequence_) continue;                        // an answer to an earlier question that timed out
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) return std::nullopt;  // NLMSG_ERROR: no such socket
      auto* msg = static_cast<inet_diag_msg*>(NLMSG_DATA(h));
      int length = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(*msg)));
      for (auto* a = reinterpret_cast<rtattr*>(msg + 1); RTA_OK(a, length); a = RTA_NEXT(a, length)) {
        if (a->rta_type != INET_DIAG_SKMEMINFO || RTA_PAYLOAD(a) < (SK_MEMINFO_RMEM_ALLOC + 1) * sizeof(uint32_t))
          continue;
        return static_cast<const uint32_t*>(RTA_DATA(a))[SK_MEMINFO_RMEM_ALLOC];
      }
      return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace rdmagw::local
