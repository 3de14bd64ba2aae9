#pragma once
// The takeover channel (docs/operations.md, "Takeover"): the running
// process listens on an abstract Unix socket named after its tunnel address,
// so that a new process started with --takeover on the same configuration
// finds it with no setting of its own. Abstract sockets live in the network
// namespace: a sidecar container restarted in the same pod finds its
// predecessor. Only the same user (or root) may connect (SO_PEERCRED).
//
// Messages: a 20-byte header (magic, type, payload length, socket count),
// the sockets riding on the header (SCM_RIGHTS, at most kMaxFdsPerMessage),
// then the payload.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "config/config.h"

namespace rdmagw {

enum class TakeoverMessage : uint32_t {
  kHello = 1,    // new -> old: asks to take over (payload: version, pid)
  kSockets = 2,  // old -> new: sockets only, in order
  kImage = 3,    // old -> new: the process image (takeover_image.h)
  kAdopted = 4,  // new -> old: everything is running here; exit
  kRefused = 5,  // either way: the takeover cannot go on (payload: why)
};

inline constexpr size_t kMaxFdsPerMessage = 250;  // under the kernel's SCM_MAX_FD

// "@rdmagw-takeover/<node>/<tunnel address>:<tcp_port>" (the @ is the
// abstract namespace's leading NUL).
std::string takeover_address(const Config& config);

// The running process's listening socket; invalid with *error.
UniqueFd listen_for_takeover(const Config& config, std::string* error);
// A new process: connected, or invalid with *error; *nobody is set when no
// process listens (nothing to take over).
UniqueFd connect_for_takeover(const Config& config, bool* nobody, std::string* error);
// Whether the connected process may take over: same user as us, or root.
// *pid: its process id as the kernel saw it connect (SO_PEERCRED), or 0.
bool takeover_peer_allowed(int fd, std::string* who, pid_t* pid);

struct TakeoverMessageIn {
  TakeoverMessage type = TakeoverMessage::kRefused;
  std::vector<uint8_t> payload;
  std::vector<UniqueFd> fds;
};
bool send_takeover_message(int fd, TakeoverMessage type, const std::vector<uint8_t>& payload,
                           const std::vector<int>& fds, std::string* error);
bool receive_takeover_message(int fd, TakeoverMessageIn* out, std::string* error);

}  // namespace rdmagw
