// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

namespace rdmagw::io {

// Whether this process may create an io_uring at all, asked once before any
// listener is bound. Empty when it may; otherwise one sentence for the
// operator saying what forbids it and what to do: a container's seccomp
// profile (the runtimes' defaults block io_uring; docker/seccomp.json does
// not), the kernel.io_uring_disabled sysctl, or a kernel without io_uring.
// Any other failure (e.g. memory) is left to the workers, which report it.
std::string io_uring_blocked_reason();

}  // namespace rdmagw::io
