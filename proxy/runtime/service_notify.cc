// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/service_notify.h"

#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "common/log.h"

namespace rdmagw {

namespace {

// A manager that stopped reading must not hold the main thread (a datagram
// socket's send blocks while the receiver's queue is full); a notification
// that does not go out in this time is dropped and logged.
constexpr timeval kSendTimeout{2, 0};

}  // namespace

bool parse_notify_address(std::string_view value, NotifyAddress* out, std::string* error) {
  *out = NotifyAddress{};
  out->addr.sun_family = AF_UNIX;
  constexpr size_t kPathMax = sizeof(out->addr.sun_path);
  if (value.empty()) {
    *error = "empty";
    return false;
  }
  if (value.front() == '@') {
    // The abstract namespace: sun_path starts with a NUL, and the name is
    // exactly the bytes after it (the length says where it ends).
    std::string_view name = value.substr(1);
    if (name.empty()) {
      *error = "'@' names no abstract socket";
      return false;
    }
    if (name.size() > kPathMax - 1) {
      *error = "abstract name longer than " + std::to_string(kPathMax - 1) + " bytes";
      return false;
    }
    out->addr.sun_path[0] = '\0';
    memcpy(out->addr.sun_path + 1, name.data(), name.size());
    out->length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    return true;
  }
  if (value.front() != '/') {
    *error = value.starts_with("vsock:") ? "an AF_VSOCK address (rdmagw sends to AF_UNIX sockets only)"
                                         : "neither an absolute path nor an abstract socket ('@NAME')";
    return false;
  }
  if (value.size() > kPathMax - 1) {
    *error = "path longer than " + std::to_string(kPathMax - 1) + " bytes";
    return false;
  }
  memcpy(out->addr.sun_path, value.data(), value.size());
  out->length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + value.size() + 1);
  return true;
}

std::string format_notify_message(const NotifyFields& fields) {
  std::string out;
  for (const auto& [key, value] : fields) {
    out += key;
    out += '=';
    for (char c : value) {
      auto byte = static_cast<unsigned char>(c);
      out += (byte < 0x20 || byte == 0x7f) ? ' ' : c;
    }
    out += '\n';
  }
  return out;
}

uint64_t monotonic_usec() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
}

ServiceNotifier ServiceNotifier::from_environment() {
  const char* value = getenv("NOTIFY_SOCKET");
  return ServiceNotifier(value ? value : "");
}

ServiceNotifier::ServiceNotifier(std::string_view socket_value) : socket_(socket_value) {
  if (socket_.empty()) return;  // not started by a service manager
  std::string error;
  if (!parse_notify_address(socket_, &address_, &error)) {
    warn_once("NOTIFY_SOCKET is unusable: " + error);
    return;
  }
  UniqueFd fd(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    warn_once(std::string("socket: ") + strerror(errno));
    return;
  }
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &kSendTimeout, sizeof(kSendTimeout));
  fd_ = std::move(fd);
}

void ServiceNotifier::warn_once(const std::string& reason) {
  if (warned_.exchange(true)) return;
  log::warn("service_notify_failed")
      .kv("socket", socket_)
      .kv("reason", reason)
      .kv("effect", "the service manager is not told about readiness, reloads or stopping; rdmagw runs on");
}

bool ServiceNotifier::send(const NotifyFields& fields) {
  if (!fd_.valid()) return false;
  std::string message = format_notify_message(fields);
  ssize_t n = sendto(fd_.get(), message.data(), message.size(), MSG_NOSIGNAL,
                     reinterpret_cast<const sockaddr*>(&address_.addr), address_.length);
  if (n < 0) {
    warn_once(std::string("sendto: ") + strerror(errno));
    return false;
  }
  return true;
}

void ServiceNotifier::ready(std::string_view status) { send({{"READY", "1"}, {"STATUS", std::string(status)}}); }

void ServiceNotifier::reloading(std::string_view status) {
  // MONOTONIC_USEC lets a Type=notify-reload manager (systemd 253+) match
  // this RELOADING=1 to the reload it asked for; older ones ignore it.
  send({{"RELOADING", "1"}, {"STATUS", std::string(status)}, {"MONOTONIC_USEC", std::to_string(monotonic_usec())}});
}

void ServiceNotifier::stopping(std::string_view status) { send({{"STOPPING", "1"}, {"STATUS", std::string(status)}}); }

void ServiceNotifier::status(std::string_view status) { send({{"STATUS", std::string(status)}}); }

void ServiceNotifier::main_pid(pid_t pid, std::string_view status) {
  send({{"MAINPID", std::to_string(pid)}, {"STATUS", std::string(status)}});
}

}  // namespace rdmagw
