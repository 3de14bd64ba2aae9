// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/inherited_sockets.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>

namespace rdmagw {

namespace {

int socket_option(int fd, int option) {
  int value = -1;
  socklen_t n = sizeof(value);
  if (getsockopt(fd, SOL_SOCKET, option, &value, &n) != 0) return -1;
  return value;
}

bool is_stream_socket(int fd, std::string* error) {
  if (socket_option(fd, SO_TYPE) != SOCK_STREAM) {
    *error = "not a stream socket";
    return false;
  }
  if (socket_option(fd, SO_ACCEPTCONN) != 0) {
    *error = "a listening socket where a connection was expected";
    return false;
  }
  return true;
}

}  // namespace

bool is_listener_for(int fd, const Endpoint& endpoint, std::string* error) {
  if (socket_option(fd, SO_TYPE) != SOCK_STREAM || socket_option(fd, SO_ACCEPTCONN) != 1) {
    *error = "not a listening stream socket";
    return false;
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    *error = std::string("getsockname: ") + std::strerror(errno);
    return false;
  }
  std::string is = sockaddr_to_string(reinterpret_cast<const sockaddr*>(&bound), len);
  std::string want = sockaddr_to_string(reinterpret_cast<const sockaddr*>(&endpoint.addr), endpoint.addr_len);
  if (bound.ss_family != endpoint.addr.ss_family || is != want) {
    *error = "bound to " + is + ", not " + want;
    return false;
  }
  return true;
}

bool check_inherited_sockets(const ProcessImage& image, const std::vector<UniqueFd>& fds, const Config& config,
                             std::string* error) {
  auto fail = [&](const std::string& what, uint32_t index, const std::string& why) {
    *error = what + " (socket " + std::to_string(index) + "): " + why;
    return false;
  };
  for (const ListenerImage& l : image.listeners) {
    std::string why;
    auto endpoint = parse_endpoint(l.endpoint, &why);
    if (!endpoint) {
      *error = "listener " + l.endpoint + ": " + why;
      return false;
    }
    for (uint32_t i : l.fds)
      if (!is_listener_for(fds[i].get(), *endpoint, &why)) return fail("listener " + l.endpoint, i, why);
  }
  std::string why;
  auto tunnel = make_tcp_endpoint(config.tunnel.address, config.tunnel.tcp_port, &why);
  if (!tunnel) {
    *error = "tunnel.address: " + why;
    return false;
  }
  for (uint32_t i : image.tunnel_fds)
    if (!is_listener_for(fds[i].get(), *tunnel, &why)) return fail("the tunnel's socket", i, why);
  for (const WorkerImage& w : image.workers) {
    for (const auto& s : w.connections.streams)
      if (!is_stream_socket(fds[s.fd].get(), &why)) return fail("a stream of listener '" + s.listener + "'", s.fd, why);
    for (const auto& p : w.connections.pipes)
      for (uint32_t i : {p.client_fd, p.server_fd})
        if (!is_stream_socket(fds[i].get(), &why)) return fail("a passthrough connection", i, why);
  }
  return true;
}

}  // namespace rdmagw
