// SPDX-License-Identifier: Apache-2.0
#include "proxy/transport/tcp/tcp_connector.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <optional>

#include "common/log.h"
#include "common/socket_options.h"
#include "proxy/io/timed_connect.h"
#include "proxy/transport/tcp/tcp_transport.h"

namespace rdmagw::transport {

namespace {

// The socket and its connect in flight; tells the dial's observer, unless
// the dial was dropped first.
class TcpConnectAttempt final : public IoObject {
 public:
  TcpConnectAttempt(EventLoop& loop, BufferPool& pool, uint32_t max_data, bool splice, UniqueFd fd, std::string remote,
                    tunnel::DialObserver* observer)
      : IoObject(loop),
        pool_(pool),
        max_data_(max_data),
        splice_(splice),
        fd_(std::move(fd)),
        remote_(std::move(remote)),
        observer_(observer) {
    connect_.bind<&TcpConnectAttempt::on_connected>(this);
  }
  void start(const Endpoint& peer, uint32_t timeout_ms) {
    connect_.start(loop(), fd_.get(), peer.addr, peer.addr_len, timeout_ms);
  }
  // The dial was dropped: tell nobody, stop connecting.
  void abandon() {
    observer_ = nullptr;
    connect_.cancel(loop());
  }

 private:
  ~TcpConnectAttempt() override = default;
  void on_connected(int error) {
    tunnel::DialObserver* observer = std::exchange(observer_, nullptr);
    if (!observer) return;
    if (error != 0) {
      observer->on_dial_failed("connect " + remote_ + ": " + strerror(error), error == ECONNREFUSED);
      return;
    }
    set_nodelay(fd_.get());
    observer->on_dialed(make_io<TcpTransport>(loop(), pool_, std::move(fd_), max_data_, remote_, splice_));
  }

  BufferPool& pool_;
  uint32_t max_data_;
  bool splice_;
  UniqueFd fd_;
  std::string remote_;
  tunnel::DialObserver* observer_;
  TimedConnect connect_;
};

class TcpDial final : public tunnel::Dial {
 public:
  explicit TcpDial(IoPtr<TcpConnectAttempt> attempt) : attempt_(std::move(attempt)) {}
  ~TcpDial() override { attempt_->abandon(); }

 private:
  IoPtr<TcpConnectAttempt> attempt_;
};

}  // namespace

std::unique_ptr<tunnel::Dial> TcpConnector::dial(const Endpoint& peer, uint32_t timeout_ms, const tunnel::SessionToken*,
                                                 tunnel::DialObserver* observer, std::string* error) {
  int fd = ::socket(peer.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + strerror(errno);
    return nullptr;
  }
  UniqueFd owned(fd);
  if (source_) {
    // The port comes with the connect (the 4-tuple), not with bind: a bind
    // that picked it would spend one port of the host per dial.
    int one = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&source_->addr), source_->addr_len) != 0) {
      *error = "bind to " + sockaddr_to_string(reinterpret_cast<const sockaddr*>(&source_->addr), source_->addr_len) +
               " (tunnel.address) to dial from it: " + strerror(errno);
      return nullptr;
    }
  }
  auto attempt = make_io<TcpConnectAttempt>(
      loop_, pool_, max_data_, splice_, std::move(owned),
      sockaddr_to_string(reinterpret_cast<const sockaddr*>(&peer.addr), peer.addr_len), observer);
  attempt->start(peer, timeout_ms);
  return std::make_unique<TcpDial>(std::move(attempt));
}

TcpTransportListener::TcpTransportListener(EventLoop& loop, BufferPool& pool, int listen_fd, uint32_t max_data,
                                           bool splice, tunnel::HandshakeGate gate)
    : loop_(loop), pool_(pool), max_data_(max_data), splice_(splice), gate_(std::move(gate)) {
  acceptor_ = make_io<Acceptor>(loop_, listen_fd, "tunnel", [this](UniqueFd fd) { on_accept(std::move(fd)); });
}

TcpTransportListener::~TcpTransportListener() { stop(); }

void TcpTransportListener::start(tunnel::InboundObserver* observer) {
  observer_ = observer;
  acceptor_->start();
}

void TcpTransportListener::stop() {
  if (!acceptor_) return;
  acceptor_->stop();
  acceptor_.reset();  // freed once its cancelled accept completes
}

void TcpTransportListener::tick() {
  if (acceptor_) acceptor_->tick();
}

void TcpTransportListener::on_accept(UniqueFd fd) {
  set_nodelay(fd.get());
  std::string remote = peer_address(fd.get());
  std::optional<tunnel::HandshakeSlot> slot = gate_.enter(remote, "tcp");
  if (!slot) {
    // Refused before anything is spent on it; a reset tells the peer at once.
    linger zero{1, 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &zero, sizeof(zero));
    return;
  }
  if (!observer_) return;
  try {
    auto transport = make_io<TcpTransport>(loop_, pool_, std::move(fd), max_data_, remote, splice_);
    transport->hold(std::move(*slot));
    observer_->on_inbound(std::move(transport));
  } catch (const std::bad_alloc&) {
    // This connection goes (its socket closes with what was built of it);
    // the process and every other connection go on.
    log::warn("tunnel_accept_failed").kv("remote", remote).kv("reason", "out of memory");
  }
}

}  // namespace rdmagw::transport
