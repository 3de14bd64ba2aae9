// SPDX-License-Identifier: Apache-2.0
#pragma once
// The takeover channel (docs/operations.md, "Takeover"): the running
// process listens on an abstract Unix socket named after its tunnel address,
// so that a new process started with --takeover on the same configuration
// finds it with no setting of its own. Abstract sockets live in the network
// namespace: a sidecar container restarted in the same pod finds its
// predecessor. Only the same user (or root) may be at either end: the
// running process checks who connects, the new one who listens and who
// answers (SO_PEERCRED, SCM_CREDENTIALS). The listening socket itself moves
// to the new process with everything else, so the name is never free for
// another user to bind between two processes.
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
  kHello = 1,      // new -> old: asks to take over (payload: version, pid, features)
  kSockets = 2,    // old -> new: sockets only, in order
  kImage = 3,      // old -> new: the process image (takeover_image.h)
  kAdopted = 4,    // new -> old: everything is rebuilt here; let go
  kRefused = 5,    // either way: the takeover cannot go on (payload: why)
  kWelcome = 6,    // old -> new, first, if HELLO asked (kTakeoverCommit): the
                   // sender's credentials (SCM_CREDENTIALS, checked by the
                   // kernel) and the channel's own listening socket
  kReleased = 7,   // old -> new, the answer to ADOPTED (kTakeoverCommit): it
                   // has let go; only now may the new process serve
  kLocalLegs = 8,  // old -> new, before IMAGE, if HELLO asked (kTakeoverLocalLegs)
                   // and it redirects its local legs: the maps' layout and
                   // cgroup; the link and the maps ride on it
};

// HELLO's feature bits. An rdmagw that does not know one ignores it, and
// then sends neither WELCOME nor RELEASED: the new process falls back to
// what that version does (docs/operations.md, "Takeover").
inline constexpr uint32_t kTakeoverCommit = 1;
// The new process adopts redirected local legs (LOCAL_LEGS). An old process
// that redirects them refuses a new one without it.
inline constexpr uint32_t kTakeoverLocalLegs = 2;

inline constexpr size_t kMaxFdsPerMessage = 250;  // under the kernel's SCM_MAX_FD
// Bounds what a process at the other end may make us allocate: a payload is
// read as it arrives, never sized in advance from the header.
inline constexpr uint64_t kMaxTakeoverPayload = uint64_t{8} << 30;

// "@rdmagw-takeover/<tunnel address>:<tcp_port>" (the @ is the abstract
// namespace's leading NUL).
std::string takeover_address(const Config& config);

// The running process's listening socket; invalid with *error (*in_use: the
// name is bound already, by a predecessor still exiting or by anyone else).
UniqueFd listen_for_takeover(const Config& config, bool* in_use, std::string* error);
// A new process: connected, or invalid with *error; *nobody is set when no
// process listens (nothing to take over). The socket passes credentials
// (SO_PASSCRED), so that WELCOME's can be read.
UniqueFd connect_for_takeover(const Config& config, bool* nobody, std::string* error);

// A process at the other end of the channel, as the kernel tells it.
struct TakeoverPeer {
  pid_t pid = 0;
  uid_t uid = 0;
  std::string describe() const;  // "pid 123 (rdmagw) uid 0"
};
// Only the same user, or root, may be on either end of a takeover: an
// abstract socket has no file permissions, and either end hands the other
// every connection it carries.
bool takeover_uid_allowed(uid_t uid);
// Who holds the other end of connected `fd` (SO_PEERCRED: for a process
// that connected, itself; for a listener, whoever called listen()).
bool takeover_peer_of(int fd, TakeoverPeer* peer, std::string* error);
// Whether `fd` is a listening socket bound to this configuration's channel
// name (what WELCOME must bring); false with *error saying what it is.
bool is_takeover_listener(int fd, const Config& config, std::string* error);
// Receives on `fd` wait at most `ms` (30 s unless changed).
void set_receive_timeout(int fd, uint32_t ms);
// The name a process runs under (/proc/PID/comm), or "" if gone.
std::string process_name(pid_t pid);
struct TakeoverMessageIn {
  TakeoverMessage type = TakeoverMessage::kRefused;
  std::vector<uint8_t> payload;
  std::vector<UniqueFd> fds;
  bool has_sender = false;  // SCM_CREDENTIALS came with it (the receiver has SO_PASSCRED)
  TakeoverPeer sender;
};
// `with_credentials`: our pid, uid and gid ride on the message, checked by
// the kernel (a process cannot claim another's without privilege).
bool send_takeover_message(int fd, TakeoverMessage type, const std::vector<uint8_t>& payload,
                           const std::vector<int>& fds, std::string* error, bool with_credentials = false);
bool receive_takeover_message(int fd, TakeoverMessageIn* out, std::string* error);

}  // namespace rdmagw
