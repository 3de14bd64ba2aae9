// SPDX-License-Identifier: Apache-2.0
#include "proxy/io/io_uring_access.h"

#include <linux/io_uring.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace rdmagw::io {
namespace {

// kernel.io_uring_disabled (Linux 6.6+): 0 allowed, 1 only for the group in
// kernel.io_uring_group and CAP_SYS_ADMIN, 2 nobody. -1 when the sysctl does
// not exist.
int io_uring_disabled_sysctl() {
  std::ifstream in("/proc/sys/kernel/io_uring_disabled");
  int value = -1;
  if (!(in >> value)) return -1;
  return value;
}

constexpr const char* kProfileAdvice =
    "run the container with the seccomp profile rdmagw ships, docker/seccomp.json (the runtime default plus "
    "io_uring_setup, io_uring_enter and io_uring_register): --security-opt seccomp=seccomp.json, or a Kubernetes "
    "Localhost profile; see docs/deploy.md, \"Seccomp\"";

}  // namespace

std::string io_uring_blocked_reason() {
  // The raw call, not liburing: the question is only whether the kernel lets
  // this process set up a ring; a tiny one is closed at once.
  io_uring_params params{};
  long fd = syscall(__NR_io_uring_setup, 2, &params);
  if (fd >= 0) {
    close(static_cast<int>(fd));
    return {};
  }
  int err = errno;
  std::string call = std::string("io_uring_setup: ") + strerror(err);
  if (err != ENOSYS && err != EPERM) return {};
  int sysctl = io_uring_disabled_sysctl();
  if (err == EPERM && sysctl > 0) {
    return "io_uring is disabled on this host (" + call +
           "; sysctl kernel.io_uring_disabled=" + std::to_string(sysctl) +
           (sysctl == 1 ? ": only members of kernel.io_uring_group may use it): " : "): ") +
           "rdmagw needs io_uring; set kernel.io_uring_disabled=0" +
           (sysctl == 1 ? " or run rdmagw in kernel.io_uring_group" : "");
  }
  // ENOSYS: podman's default profile, or a kernel built without io_uring
  // (CONFIG_IO_URING=n); EPERM: Docker's default profile, or another
  // seccomp or LSM policy.
  return "io_uring is blocked (" + call + "), most likely by a seccomp profile such as a container runtime's default" +
         (err == ENOSYS ? " (or this kernel was built without io_uring)" : "") + ": " + kProfileAdvice;
}

}  // namespace rdmagw::io
