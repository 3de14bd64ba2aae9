// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a new process checks of the sockets a takeover brought, before it
// builds anything on them: each is what the image says it is. A listener is
// a listening socket bound to its endpoint (a unix listener to its path),
// the tunnel's sockets listen on the tunnel address, every connection is a
// stream socket; no socket is named twice (decode_process_image). The old
// process is trusted (checked by the kernel's credentials first); this keeps
// a confused or forged image from making rdmagw act on a file or a socket
// that is not what it claims, e.g. unlink a path it never bound.
#include <string>
#include <vector>

#include "common/address.h"
#include "common/unique_fd.h"
#include "config/config.h"
#include "proxy/runtime/takeover_image.h"

namespace rdmagw {

// Whether `fd` is a listening stream socket bound to `endpoint` (for a unix
// socket: to its path); false with *error saying what it is instead.
bool is_listener_for(int fd, const Endpoint& endpoint, std::string* error);

// Every socket of `image` against `fds` (already counted: image.fd_count ==
// fds.size()); false with *error naming the first that does not match.
bool check_inherited_sockets(const ProcessImage& image, const std::vector<UniqueFd>& fds, const Config& config,
                             std::string* error);

}  // namespace rdmagw
