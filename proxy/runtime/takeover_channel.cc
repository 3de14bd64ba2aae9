// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/takeover_channel.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

namespace rdmagw {

namespace {

constexpr uint32_t kMagic = 0x54574752;  // "RGWT"
constexpr size_t kHeaderSize = 20;
constexpr size_t kPayloadChunk = size_t{1} << 20;  // a payload grows by this much as it arrives
constexpr int kIoTimeoutSeconds = 30;              // a peer process that stops answering

sockaddr_un address_of(const Config& config, socklen_t* len) {
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  std::string name = takeover_address(config).substr(1);  // without the '@'
  name = name.substr(0, sizeof(un.sun_path) - 2);
  std::memcpy(un.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return un;
}

void set_timeouts(int fd) {
  timeval tv{kIoTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

bool io_error(const char* what, std::string* error) {
  *error = std::string(what) + ": " + (errno == EAGAIN ? "the other process did not answer in time" : strerror(errno));
  return false;
}

bool write_all(int fd, const uint8_t* p, size_t n, std::string* error) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return io_error("send", error);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, uint8_t* p, size_t n, std::string* error) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      *error = "the other process closed the takeover channel";
      return false;
    }
    if (r < 0) return io_error("recv", error);
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

std::string takeover_address(const Config& config) {
  return "@rdmagw-takeover/" + config.tunnel.address + ":" + std::to_string(config.tunnel.tcp_port);
}

UniqueFd listen_for_takeover(const Config& config, bool* in_use, std::string* error) {
  *in_use = false;
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    *error = std::string("socket: ") + strerror(errno);
    return {};
  }
  socklen_t len;
  sockaddr_un un = address_of(config, &len);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&un), len) != 0 || ::listen(fd.get(), 4) != 0) {
    *in_use = errno == EADDRINUSE;
    *error = takeover_address(config) + ": " + strerror(errno);
    return {};
  }
  return fd;
}

UniqueFd connect_for_takeover(const Config& config, bool* nobody, std::string* error) {
  *nobody = false;
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    *error = std::string("socket: ") + strerror(errno);
    return {};
  }
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
  socklen_t len;
  sockaddr_un un = address_of(config, &len);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&un), len) != 0) {
    *nobody = errno == ECONNREFUSED || errno == ENOENT;
    *error = takeover_address(config) + ": " + strerror(errno);
    return {};
  }
  set_timeouts(fd.get());
  return fd;
}

std::string process_name(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/comm", static_cast<int>(pid));
  UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return {};
  char name[64];
  ssize_t n = ::read(fd.get(), name, sizeof(name));
  if (n <= 0) return {};
  std::string s(name, static_cast<size_t>(n));
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

std::string TakeoverPeer::describe() const {
  std::string name = process_name(pid);
  return "pid " + std::to_string(pid) + (name.empty() ? "" : " (" + name + ")") + " uid " + std::to_string(uid);
}

bool is_takeover_listener(int fd, const Config& config, std::string* error) {
  int listening = 0, domain = 0;
  socklen_t n = sizeof(int);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &n) != 0 || !listening) {
    *error = "not a listening socket";
    return false;
  }
  n = sizeof(int);
  sockaddr_un bound{};
  socklen_t bound_len = sizeof(bound);
  socklen_t want_len;
  sockaddr_un want = address_of(config, &want_len);
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &n) != 0 || domain != AF_UNIX ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0 || bound_len != want_len ||
      std::memcmp(&bound, &want, want_len) != 0) {
    *error = "a socket not bound to " + takeover_address(config);
    return false;
  }
  return true;
}

void set_receive_timeout(int fd, uint32_t ms) {
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

bool takeover_uid_allowed(uid_t uid) { return uid == geteuid() || uid == 0; }

bool takeover_peer_of(int fd, TakeoverPeer* peer, std::string* error) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    *error = std::string("SO_PEERCRED: ") + strerror(errno);
    return false;
  }
  peer->pid = cred.pid;
  peer->uid = cred.uid;
  set_timeouts(fd);
  return true;
}

bool send_takeover_message(int fd, TakeoverMessage type, const std::vector<uint8_t>& payload,
                           const std::vector<int>& fds, std::string* error, bool with_credentials) {
  if (fds.size() > kMaxFdsPerMessage) {
    *error = "too many sockets in one message";
    return false;
  }
  uint8_t header[kHeaderSize];
  put_u32(header, kMagic);
  put_u32(header + 4, static_cast<uint32_t>(type));
  put_u64(header + 8, payload.size());
  put_u32(header + 16, static_cast<uint32_t>(fds.size()));
  iovec iov{header, sizeof(header)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  size_t rights = fds.empty() ? 0 : CMSG_SPACE(sizeof(int) * fds.size());
  size_t creds = with_credentials ? CMSG_SPACE(sizeof(ucred)) : 0;
  std::vector<uint8_t> control(rights + creds, 0);
  if (!control.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (!fds.empty()) {
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
      c = CMSG_NXTHDR(&msg, c);
    }
    if (with_credentials) {
      ucred own{getpid(), geteuid(), getegid()};
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_CREDENTIALS;
      c->cmsg_len = CMSG_LEN(sizeof(ucred));
      std::memcpy(CMSG_DATA(c), &own, sizeof(own));
    }
  }
  ssize_t n;
  do {
    n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return io_error("sendmsg", error);
  // The sockets went with the first byte; the rest of the header follows.
  if (!write_all(fd, header + n, sizeof(header) - static_cast<size_t>(n), error)) return false;
  return write_all(fd, payload.data(), payload.size(), error);
}

bool receive_takeover_message(int fd, TakeoverMessageIn* out, std::string* error) {
  uint8_t header[kHeaderSize];
  iovec iov{header, sizeof(header)};
  alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage) + CMSG_SPACE(sizeof(ucred))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n == 0) {
    *error = "the other process closed the takeover channel";
    return false;
  }
  if (n < 0) return io_error("recvmsg", error);
  out->fds.clear();
  out->has_sender = false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
      ucred cred;
      std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
      out->has_sender = true;
      out->sender.pid = cred.pid;
      out->sender.uid = cred.uid;
      continue;
    }
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      out->fds.emplace_back(received);
    }
  }
  if (msg.msg_flags & MSG_CTRUNC) {
    *error = "more sockets than one message may carry";
    return false;
  }
  if (!read_all(fd, header + n, sizeof(header) - static_cast<size_t>(n), error)) return false;
  if (get_u32(header) != kMagic) {
    *error = "not a takeover message (bad magic)";
    return false;
  }
  uint32_t type = get_u32(header + 4);
  uint64_t size = get_u64(header + 8);
  uint32_t fds = get_u32(header + 16);
  if (type < 1 || type > static_cast<uint32_t>(TakeoverMessage::kLocalLegs) || size > kMaxTakeoverPayload ||
      fds != out->fds.size()) {
    *error = "malformed takeover message (type " + std::to_string(type) + ", " + std::to_string(size) + " bytes, " +
             std::to_string(fds) + " sockets announced, " + std::to_string(out->fds.size()) + " came)";
    return false;
  }
  out->type = static_cast<TakeoverMessage>(type);
  // Grown as the bytes come, so a header that announces gigabytes costs
  // nothing until they are really sent.
  out->payload.clear();
  while (out->payload.size() < size) {
    size_t at = out->payload.size();
    size_t part = static_cast<size_t>(std::min<uint64_t>(size - at, kPayloadChunk));
    out->payload.resize(at + part);
    if (!read_all(fd, out->payload.data() + at, part, error)) return false;
  }
  return true;
}

}  // namespace rdmagw
