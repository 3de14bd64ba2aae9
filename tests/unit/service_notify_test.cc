// SPDX-License-Identifier: Apache-2.0
// The sd_notify side of rdmagw (proxy/runtime/service_notify.h): what
// $NOTIFY_SOCKET may name, the datagram's text, and real sends to a bound
// AF_UNIX datagram socket (path and abstract), as systemd's receiving end is.
#include "proxy/runtime/service_notify.h"

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>
#include <string>

using namespace rdmagw;

namespace {

// A datagram socket bound where NOTIFY_SOCKET points, as a manager's is.
struct Receiver {
  UniqueFd fd;
  std::string name;  // the NOTIFY_SOCKET value that reaches it
  std::string dir;   // a path socket's directory, removed at the end

  explicit Receiver(bool abstract) {
    fd.reset(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    REQUIRE(fd.valid());
    if (abstract) {
      name = "@rdmagw-notify-test/" + std::to_string(getpid());
    } else {
      char tmpl[] = "/tmp/rdmagw-notify-XXXXXX";
      REQUIRE(mkdtemp(tmpl) != nullptr);
      dir = tmpl;
      name = dir + "/notify";
    }
    NotifyAddress address;
    std::string error;
    REQUIRE(parse_notify_address(name, &address, &error));
    REQUIRE(bind(fd.get(), reinterpret_cast<const sockaddr*>(&address.addr), address.length) == 0);
  }
  ~Receiver() {
    if (!dir.empty()) {
      unlink(name.c_str());
      rmdir(dir.c_str());
    }
  }
  // One datagram, or "" after a second.
  std::string receive() {
    pollfd p{fd.get(), POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) return "";
    char buf[4096];
    ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
};

// What the code under test writes to stderr (the log) while `body` runs.
template <typename F>
std::string stderr_of(F body) {
  char path[] = "/tmp/rdmagw-notify-log-XXXXXX";
  int file = mkstemp(path);
  REQUIRE(file >= 0);
  unlink(path);
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  dup2(file, STDERR_FILENO);
  body();
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string out;
  lseek(file, 0, SEEK_SET);
  char buf[4096];
  ssize_t n;
  while ((n = read(file, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(file);
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("sd_notify: fields go out as KEY=VALUE lines in the order given", "[notify]") {
  CHECK(format_notify_message({{"READY", "1"}, {"STATUS", "Ready: 2 listeners"}}) ==
        "READY=1\nSTATUS=Ready: 2 listeners\n");
  CHECK(format_notify_message({}) == "");
}

TEST_CASE("sd_notify: a value cannot start a field of its own", "[notify]") {
  // A STATUS quoting a file name or an error must not smuggle in READY=1.
  std::string out = format_notify_message({{"STATUS", "bad\nREADY=1\r\tx\x7f"}});
  CHECK(out == "STATUS=bad READY=1  x \n");
  CHECK(count(out, "\n") == 1);
}

TEST_CASE("sd_notify: an abstract socket is '@' then the name, with a leading NUL and no trailing one", "[notify]") {
  NotifyAddress a;
  std::string error;
  REQUIRE(parse_notify_address("@systemd/notify", &a, &error));
  CHECK(a.addr.sun_family == AF_UNIX);
  CHECK(a.addr.sun_path[0] == '\0');
  CHECK(std::string(a.addr.sun_path + 1, 14) == "systemd/notify");
  CHECK(a.length == offsetof(sockaddr_un, sun_path) + 1 + 14);
}

TEST_CASE("sd_notify: a path keeps its terminating NUL in the length", "[notify]") {
  NotifyAddress a;
  std::string error;
  REQUIRE(parse_notify_address("/run/systemd/notify", &a, &error));
  CHECK(std::string(a.addr.sun_path) == "/run/systemd/notify");
  CHECK(a.length == offsetof(sockaddr_un, sun_path) + 19 + 1);
}

TEST_CASE("sd_notify: values naming no usable AF_UNIX socket are refused with a reason", "[notify]") {
  NotifyAddress a;
  std::string error;
  CHECK_FALSE(parse_notify_address("", &a, &error));
  CHECK_FALSE(parse_notify_address("@", &a, &error));
  CHECK(error == "'@' names no abstract socket");
  CHECK_FALSE(parse_notify_address("run/systemd/notify", &a, &error));
  CHECK(error.find("absolute path") != std::string::npos);
  CHECK_FALSE(parse_notify_address("vsock:2:1234", &a, &error));
  CHECK(error.find("AF_VSOCK") != std::string::npos);
  // sun_path holds 108 bytes: a path of 107 and its NUL, or NUL and a name of 107.
  CHECK(parse_notify_address("/" + std::string(106, 'p'), &a, &error));
  CHECK_FALSE(parse_notify_address("/" + std::string(107, 'p'), &a, &error));
  CHECK(parse_notify_address("@" + std::string(107, 'n'), &a, &error));
  CHECK_FALSE(parse_notify_address("@" + std::string(108, 'n'), &a, &error));
}

TEST_CASE("sd_notify: without NOTIFY_SOCKET nothing is sent and nothing is logged", "[notify]") {
  std::string log = stderr_of([] {
    ServiceNotifier none("");
    CHECK_FALSE(none.active());
    CHECK_FALSE(none.send({{"READY", "1"}}));
    none.ready("Ready");
    none.stopping("Draining");
  });
  CHECK(log.empty());
}

TEST_CASE("sd_notify: READY, RELOADING and STOPPING reach an abstract socket", "[notify]") {
  Receiver manager(true);
  ServiceNotifier notifier(manager.name);
  REQUIRE(notifier.active());
  notifier.ready("Ready: 1 listeners");
  CHECK(manager.receive() == "READY=1\nSTATUS=Ready: 1 listeners\n");

  uint64_t before = monotonic_usec();
  notifier.reloading("Reloading /etc/rdmagw/rdmagw.yaml");
  uint64_t after = monotonic_usec();
  std::string reloading = manager.receive();
  std::string head = "RELOADING=1\nSTATUS=Reloading /etc/rdmagw/rdmagw.yaml\nMONOTONIC_USEC=";
  REQUIRE(reloading.starts_with(head));
  REQUIRE(reloading.ends_with("\n"));
  uint64_t stamp = std::stoull(reloading.substr(head.size()));
  CHECK(stamp >= before);
  CHECK(stamp <= after);

  notifier.stopping("Draining");
  CHECK(manager.receive() == "STOPPING=1\nSTATUS=Draining\n");
  notifier.main_pid(4242, "Handed over");
  CHECK(manager.receive() == "MAINPID=4242\nSTATUS=Handed over\n");
}

TEST_CASE("sd_notify: a path socket receives the same datagrams", "[notify]") {
  Receiver manager(false);
  ServiceNotifier notifier(manager.name);
  notifier.status("Draining (POST /drain)");
  CHECK(manager.receive() == "STATUS=Draining (POST /drain)\n");
}

TEST_CASE("sd_notify: failures are logged once at warn and never stop the caller", "[notify]") {
  std::string missing = "/tmp/rdmagw-notify-nobody-" + std::to_string(getpid());
  std::string log = stderr_of([&] {
    ServiceNotifier notifier(missing);
    CHECK(notifier.active());
    CHECK_FALSE(notifier.send({{"READY", "1"}}));
    notifier.reloading("x");
    notifier.ready("y");
  });
  CHECK(count(log, "event=service_notify_failed") == 1);
  CHECK(count(log, " warn ") == 1);
  CHECK(log.find(missing) != std::string::npos);

  std::string bad = stderr_of([] {
    ServiceNotifier notifier("relative/notify");
    CHECK_FALSE(notifier.active());
    notifier.ready("y");
  });
  CHECK(count(bad, "event=service_notify_failed") == 1);
  CHECK(bad.find("NOTIFY_SOCKET is unusable") != std::string::npos);
}
