// SPDX-License-Identifier: Apache-2.0
#include "tools/rdmagwctl/http_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/unique_fd.h"

namespace rdmagw::ctl {

namespace {

using Clock = std::chrono::steady_clock;

// Larger answers mean something other than the admin endpoint is talking.
constexpr size_t kMaxResponseBytes = 256 * 1024 * 1024;

std::string timeout_text(double seconds) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%g", seconds);
  return std::string("timed out after ") + buf + "s";
}

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Waits for `events` on fd until the deadline: 1 ready, 0 timed out, -1 error
// (errno set). EINTR is returned to the caller as an error so that Ctrl-C
// is not swallowed by a long wait.
int wait_for(int fd, short events, Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  pollfd p{fd, events, 0};
  int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
  return n < 0 ? -1 : n;
}

// A connected, non-blocking socket to one resolved address, or an invalid
// fd with *reason set (empty when the deadline passed).
UniqueFd connect_one(const addrinfo& ai, Clock::time_point deadline, std::string* reason) {
  UniqueFd fd(::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol));
  if (!fd.valid()) {
    *reason = strerror(errno);
    return {};
  }
  if (::connect(fd.get(), ai.ai_addr, ai.ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS) {
    *reason = strerror(errno);
    return {};
  }
  int ready = wait_for(fd.get(), POLLOUT, deadline);
  if (ready <= 0) {
    *reason = ready == 0 ? "" : strerror(errno);
    return {};
  }
  int so_error = 0;
  socklen_t len = sizeof(so_error);
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
  if (so_error != 0) {
    *reason = strerror(so_error);
    return {};
  }
  return fd;
}

UniqueFd connect_any(const HostPort& server, double timeout_seconds, HttpFailure* failure) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* raw = nullptr;
  failure->stage = HttpFailure::Stage::kConnect;
  int rc = ::getaddrinfo(server.host.c_str(), server.port.c_str(), &hints, &raw);
  if (rc != 0) {
    failure->reason = std::string("cannot resolve ") + server.host + ": " + gai_strerror(rc);
    return {};
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> found(raw, ::freeaddrinfo);
  auto deadline = deadline_after(timeout_seconds);
  std::string reason = "no address";
  UniqueFd fd;
  for (addrinfo* ai = found.get(); ai && !fd.valid(); ai = ai->ai_next) {
    fd = connect_one(*ai, deadline, &reason);
    if (!fd.valid() && Clock::now() >= deadline) break;
  }
  if (!fd.valid()) failure->reason = reason.empty() ? timeout_text(timeout_seconds) : reason;
  return fd;
}

bool send_all(int fd, std::string_view data, Clock::time_point deadline, std::string* reason) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      *reason = std::string("sending the request: ") + strerror(errno);
      return false;
    }
    int ready = wait_for(fd, POLLOUT, deadline);
    if (ready <= 0) {
      *reason = ready == 0 ? "" : std::string("sending the request: ") + strerror(errno);
      return false;
    }
  }
  return true;
}

std::string build_request(const HostPort& server, const HttpRequest& request) {
  std::string host = server.host.find(':') != std::string::npos ? "[" + server.host + "]" : server.host;
  std::string out = request.method + " " + request.target + " HTTP/1.1\r\n";
  out += "Host: " + host + ":" + server.port + "\r\n";
  out += "User-Agent: rdmagwctl/" RDMAGW_VERSION "\r\n";
  out += "Accept: application/json, text/plain\r\n";
  out += "Connection: close\r\n";
  if (!request.bearer_token.empty()) out += "Authorization: Bearer " + request.bearer_token + "\r\n";
  if (request.method != "GET" || !request.body.empty()) {
    if (!request.body.empty()) out += "Content-Type: application/json\r\n";
    out += "Content-Length: " + std::to_string(request.body.size()) + "\r\n";
  }
  out += "\r\n";
  out += request.body;
  return out;
}

}  // namespace

std::string HostPort::display() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
}

bool parse_host_port(std::string_view text, HostPort* out, std::string* error) {
  std::string_view original = text;
  if (text.starts_with("http://")) text.remove_prefix(7);
  if (text.ends_with("/")) text.remove_suffix(1);
  auto bad = [&](const std::string& why) {
    *error = "bad admin address '" + std::string(original) + "': " + why;
    return false;
  };
  std::string_view host, port;
  if (text.starts_with("[")) {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("missing ']'");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.starts_with(":")) return bad("expected [ADDRESS]:PORT");
    port = rest.substr(1);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("expected HOST:PORT");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) return bad("write an IPv6 address in brackets, [ADDRESS]:PORT");
  }
  if (host.empty()) return bad("empty host");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
    return bad("port must be 1..65535");
  out->host = std::string(host);
  out->port = std::to_string(value);
  return true;
}

bool http_exchange(const HostPort& server, const HttpRequest& request, double timeout_seconds, HttpResponse* response,
                   HttpFailure* failure) {
  UniqueFd fd = connect_any(server, timeout_seconds, failure);
  if (!fd.valid()) return false;

  failure->stage = HttpFailure::Stage::kExchange;
  auto deadline = deadline_after(timeout_seconds);
  if (!send_all(fd.get(), build_request(server, request), deadline, &failure->reason)) {
    if (failure->reason.empty()) failure->reason = timeout_text(timeout_seconds) + " sending the request";
    return false;
  }

  std::string raw;
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int ready = wait_for(fd.get(), POLLIN, deadline);
      if (ready == 0) {
        failure->reason = timeout_text(timeout_seconds) + " waiting for the answer";
        return false;
      }
      if (ready < 0) {
        failure->reason = std::string("waiting for the answer: ") + strerror(errno);
        return false;
      }
      continue;
    }
    if (n < 0) {
      failure->reason = std::string("reading the answer: ") + strerror(errno);
      return false;
    }
    bool at_eof = n == 0;
    raw.append(buf, static_cast<size_t>(n));
    if (raw.size() > kMaxResponseBytes) {
      failure->stage = HttpFailure::Stage::kProtocol;
      failure->reason = "answer larger than " + std::to_string(kMaxResponseBytes) + " bytes";
      return false;
    }
    std::string error;
    switch (parse_http_response(raw, at_eof, response, &error)) {
      case ParseStatus::kComplete:
        return true;
      case ParseStatus::kInvalid:
        failure->stage = at_eof && raw.empty() ? HttpFailure::Stage::kExchange : HttpFailure::Stage::kProtocol;
        failure->reason = error;
        return false;
      case ParseStatus::kIncomplete:
        break;
    }
  }
}

}  // namespace rdmagw::ctl
