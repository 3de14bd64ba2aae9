// SPDX-License-Identifier: Apache-2.0
#pragma once
// Tells a service manager (systemd, Type=notify) what the process is doing,
// by the sd_notify protocol and without libsystemd: one datagram of
// "KEY=VALUE" lines to the AF_UNIX socket named by $NOTIFY_SOCKET (a path, or
// an abstract socket written with a leading '@'). Without $NOTIFY_SOCKET
// every call does nothing, so the same binary runs under systemd, in a
// container or from a shell. Sending never fails the process: the first
// error is logged at warn, later ones are not (a manager that went away
// would otherwise fill the log).
//
// What rdmagw sends and when (docs/deploy.md, "Hosts without containers"):
//   READY=1         event=ready: listeners bound, workers running; and at
//                   the end of every reload, successful or not
//   RELOADING=1     a reload starts (with MONOTONIC_USEC)
//   STOPPING=1      SIGTERM/SIGINT: the drain begins
//   MAINPID=        after a takeover, the process that now carries everything
//   STATUS=         with each of them, one line for `systemctl status`
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/unique_fd.h"

namespace rdmagw {

struct NotifyAddress {
  sockaddr_un addr{};
  socklen_t length = 0;  // what bind/sendto take: an abstract name has no trailing NUL
};

// $NOTIFY_SOCKET's value as an address. False with *error when it names no
// AF_UNIX socket rdmagw can send to (relative, too long, another family such
// as systemd 254's "vsock:").
bool parse_notify_address(std::string_view value, NotifyAddress* out, std::string* error);

// "KEY=VALUE\n" per field, in order. A value is one line: a newline in it
// would start a field of its own (STATUS carrying "READY=1"), so newlines and
// other control bytes become spaces.
using NotifyFields = std::vector<std::pair<std::string, std::string>>;
std::string format_notify_message(const NotifyFields& fields);

// CLOCK_MONOTONIC in microseconds, as MONOTONIC_USEC wants it.
uint64_t monotonic_usec();

class ServiceNotifier {
 public:
  // From the process environment's NOTIFY_SOCKET (read once, here).
  static ServiceNotifier from_environment();
  // `socket_value`: what NOTIFY_SOCKET holds; "" means no service manager.
  explicit ServiceNotifier(std::string_view socket_value);
  // Neither copied nor moved: the atomic "warned" flag belongs to one
  // socket (from_environment() returns by guaranteed elision).
  ServiceNotifier(const ServiceNotifier&) = delete;
  ServiceNotifier& operator=(const ServiceNotifier&) = delete;

  bool active() const { return fd_.valid(); }

  // Any thread may call these: each is one sendto() on a socket that is
  // never changed after construction.
  void ready(std::string_view status);
  void reloading(std::string_view status);
  void stopping(std::string_view status);
  void status(std::string_view status);
  void main_pid(pid_t pid, std::string_view status);

  // The datagram, as sent; false when it could not be (logged once).
  bool send(const NotifyFields& fields);

 private:
  void warn_once(const std::string& reason);

  std::string socket_;  // as given, for the log
  NotifyAddress address_;
  UniqueFd fd_;
  std::atomic<bool> warned_{false};
};

}  // namespace rdmagw
