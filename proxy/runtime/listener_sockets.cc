// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/listener_sockets.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "proxy/runtime/inherited_sockets.h"

namespace rdmagw {

namespace {

// Whether a process serves the unix socket at `ep`: a connect of the
// socket's own type (stream, seqpacket or datagram: a stream connect to a
// datagram socket fails with EPROTOTYPE, which says nothing about whether
// it is served) succeeds, or finds its backlog full. ECONNREFUSED: nobody
// does. Anything else (EACCES, ...): cannot tell, so the path is left alone.
enum class UnixProbe { kLive, kStale, kUnknown };
UnixProbe probe_unix_socket(const Endpoint& ep, int* error_number) {
  for (int type : {SOCK_STREAM, SOCK_SEQPACKET, SOCK_DGRAM}) {
    int probe = ::socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (probe < 0) {
      *error_number = errno;
      return UnixProbe::kUnknown;
    }
    int rc = ::connect(probe, reinterpret_cast<const sockaddr*>(&ep.addr), ep.addr_len);
    int err = rc == 0 ? 0 : errno;
    ::close(probe);
    if (rc == 0 || err == EAGAIN || err == EINPROGRESS) return UnixProbe::kLive;
    if (err == EPROTOTYPE) continue;  // another type: try the next
    if (err == ECONNREFUSED) return UnixProbe::kStale;
    *error_number = err;
    return UnixProbe::kUnknown;
  }
  *error_number = EPROTOTYPE;
  return UnixProbe::kUnknown;
}

// A process that just died (SIGKILL, a crash) may still hold its listener
// for a few milliseconds: io_uring drops the files of requests in flight
// from a kernel worker after the process is gone. So an address that looks
// held is looked at again every 50 ms for up to 2 s before it counts as
// another process's. `held` probes once (and keeps what it found).
template <class Probe>
void probe_through_grace(Probe held) {
  for (int attempt = 1; held() && attempt < 40; ++attempt) ::usleep(50 * 1000);
}

// A unix socket path left behind by a dead process is removed; one that a
// live process still serves is an error, as for a TCP port in use.
bool clear_stale_unix_socket(const Endpoint& ep, std::string* error) {
  auto* un = reinterpret_cast<const sockaddr_un*>(&ep.addr);
  struct stat st;
  if (lstat(un->sun_path, &st) != 0) return true;
  if (!S_ISSOCK(st.st_mode)) {
    *error = std::string(un->sun_path) + " exists and is not a socket";
    return false;
  }
  int err = 0;
  UnixProbe probe = UnixProbe::kUnknown;
  probe_through_grace([&] { return (probe = probe_unix_socket(ep, &err)) == UnixProbe::kLive; });
  switch (probe) {
    case UnixProbe::kLive:
      *error = std::string(un->sun_path) + " is in use by another process";
      return false;
    case UnixProbe::kUnknown:
      *error = std::string(un->sun_path) + " exists and whether a process serves it cannot be told (" + strerror(err) +
               "); remove it if it is stale";
      return false;
    case UnixProbe::kStale:
      break;
  }
  ::unlink(un->sun_path);
  return true;
}

// 0 if a plain bind (SO_REUSEADDR only: TIME_WAIT is no owner) of `ep`
// succeeds, else its errno.
int plain_bind_error(const Endpoint& ep) {
  int probe = ::socket(ep.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return errno;
  int one = 1;
  setsockopt(probe, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int err = ::bind(probe, reinterpret_cast<const sockaddr*>(&ep.addr), ep.addr_len) == 0 ? 0 : errno;
  ::close(probe);
  return err;
}

}  // namespace

int open_listening_socket(const Endpoint& ep, bool reuseport, std::string* error) {
  if (ep.kind == Endpoint::Kind::kUnix && !clear_stale_unix_socket(ep, error)) return -1;
  int fd = ::socket(ep.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + strerror(errno);
    return -1;
  }
  int one = 1;
  if (ep.kind == Endpoint::Kind::kTcp) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  }
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&ep.addr), ep.addr_len) != 0) {
    *error = std::string("bind: ") + strerror(errno);
    ::close(fd);
    return -1;
  }
  if (::listen(fd, 4096) != 0) {
    *error = std::string("listen: ") + strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

// SO_REUSEPORT lets any process of the same user bind a port that is
// already listened on, and the kernel then splits connections between them:
// a second rdmagw on the same port would silently take half of them. A bind
// without it fails while anything listens there, so one is tried first.
bool claim_tcp_port(const Endpoint& endpoint, std::string* error) {
  int err = 0;
  probe_through_grace([&] { return (err = plain_bind_error(endpoint)) == EADDRINUSE; });
  if (err == 0) return true;
  *error = std::string("bind: ") + strerror(err) + (err == EADDRINUSE ? " (another process listens there)" : "");
  return false;
}

std::shared_ptr<ListenFds> ListenFds::open(const Endpoint& endpoint, unsigned workers, std::string* error) {
  unsigned count = endpoint.kind == Endpoint::Kind::kTcp ? workers : 1;
  if (endpoint.kind == Endpoint::Kind::kTcp && !claim_tcp_port(endpoint, error)) return nullptr;
  std::vector<int> fds;
  for (unsigned w = 0; w < count; ++w) {
    int fd = open_listening_socket(endpoint, true, error);
    if (fd < 0) {
      for (int f : fds) ::close(f);
      return nullptr;
    }
    fds.push_back(fd);
  }
  return adopt(endpoint, std::move(fds), workers);
}

std::shared_ptr<ListenFds> ListenFds::adopt(const Endpoint& endpoint, std::vector<int> fds, unsigned workers) {
  // The unix socket file as it is now: ours to unlink at the end only if
  // the path still names it then, and only if it is a socket that our
  // socket is bound to (a takeover image could name any path).
  auto result = std::shared_ptr<ListenFds>(new ListenFds(endpoint, std::move(fds), workers));
  struct stat st;
  std::string not_ours;
  if (endpoint.kind == Endpoint::Kind::kUnix && !result->fds_.empty() &&
      is_listener_for(result->fds_[0], endpoint, &not_ours) &&
      lstat(reinterpret_cast<const sockaddr_un*>(&endpoint.addr)->sun_path, &st) == 0 && S_ISSOCK(st.st_mode)) {
    result->path_dev_ = st.st_dev;
    result->path_ino_ = st.st_ino;
  }
  return result;
}

void ListenFds::stop_listening(unsigned worker) {
  if (fds_.size() >= workers_) {
    ::shutdown(fd_for(worker), SHUT_RDWR);
    return;
  }
  // Shared by several workers: it stops when the last of them lets go.
  if (stopped_by_.fetch_add(1) + 1 < workers_) return;
  for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
}

ListenFds::~ListenFds() {
  for (int fd : fds_) ::close(fd);
  if (endpoint_.kind == Endpoint::Kind::kUnix && !handed_over_) {
    const char* path = reinterpret_cast<const sockaddr_un*>(&endpoint_.addr)->sun_path;
    struct stat st;
    if (lstat(path, &st) == 0 && st.st_dev == path_dev_ && st.st_ino == path_ino_) ::unlink(path);
  }
}

bool open_listener_set(const Config& config, const ListenerSet& current, ListenerSet* out, std::string* key,
                       std::string* error) {
  ListenerSet result;
  for (size_t i = 0; i < config.listeners.size(); ++i) {
    const ListenerConfig& l = config.listeners[i];
    std::shared_ptr<ListenFds> fds;
    for (const auto& old : current) {
      if (old->config.listen == l.listen && old->config.transparent == l.transparent) fds = old->fds;
    }
    if (!fds) fds = ListenFds::open(l.listen, config.workers, error);
    if (!fds) {
      *key = "listeners[" + std::to_string(i) + "].listen";
      return false;
    }
    // Kept sockets too: a reload that changes socket_mode applies it.
    if (l.socket_mode != 0 && l.listen.kind == Endpoint::Kind::kUnix) {
      const char* path = reinterpret_cast<const sockaddr_un*>(&l.listen.addr)->sun_path;
      if (::chmod(path, l.socket_mode) != 0) {
        *key = "listeners[" + std::to_string(i) + "].socket_mode";
        *error = std::string("chmod ") + path + ": " + strerror(errno);
        return false;
      }
    }
    result.push_back(std::make_shared<const ListenerSocket>(ListenerSocket{l, std::move(fds)}));
  }
  *out = std::move(result);
  return true;
}

}  // namespace rdmagw
