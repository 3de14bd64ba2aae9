#include "proxy/runtime/worker.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/socket_options.h"
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>

#include "proxy/local/direct_pipe.h"
#include "proxy/local/local_stream.h"
#include "proxy/transport/tcp/tcp_transport.h"

namespace rdmagw {

namespace {
// Virtual size of a worker's slab, in buffers. Pages are touched only when
// used, so this bounds memory without costing any up front.
constexpr size_t kSlabBuffers = 65536;
constexpr auto kTick = std::chrono::milliseconds(50);

void close_unix_listener(int fd, const Endpoint& ep) {
  ::close(fd);
  if (ep.kind == Endpoint::Kind::kUnix) {
    auto* un = reinterpret_cast<const sockaddr_un*>(&ep.addr);
    ::unlink(un->sun_path);
  }
}
}  // namespace

void ListenSockets::close_shared() {
  for (auto& l : locals) {
    if (l.fds.size() == 1 && worker_count > 1) close_unix_listener(l.fds[0], l.config->listen);
  }
}

Worker::Worker(unsigned index, std::shared_ptr<const Config> config, ListenSockets& sockets,
               const std::atomic<int>& stop_level)
    : index_(index), config_(std::move(config)), sockets_(sockets), stop_level_(stop_level) {}

Worker::~Worker() {
  // Order: streams and sessions reference the loop and the pool.
  acceptors_.clear();
  for (auto& link : links_) link->close_all("worker stopped");
  links_.clear();
  inbound_.clear();
  graveyard_.clear();
}

bool Worker::init(std::string* error) {
  log::set_thread_worker(static_cast<int>(index_));
  if (!loop_.init(4096, error)) return false;
  const TunnelConfig& t = config_->tunnel;
  size_t stride = tunnel::kBufferHeadroom + t.buffer_size;
  // With RDMA the slab is registered, i.e. pinned: its size is the operator's
  // choice (tunnel.rdma.slab_size). Without, it is reserved lazily and large.
  size_t buffers = sockets_.rdma ? std::max<size_t>(t.rdma.slab_size / ((stride + 63) & ~size_t{63}), 64) : kSlabBuffers;
  pool_ = std::make_unique<BufferPool>(stride, buffers);
  if (sockets_.rdma) rdma_ = std::make_unique<transport::RdmaContext>(*pool_, t.rdma);
  host_ = std::make_unique<local::StreamHost>(local::StreamHost{loop_, *pool_, t.buffer_size, t.connect_timeout_ms});

  session_settings_.node = config_->node;
  session_settings_.max_data = t.buffer_size;
  session_settings_.stream_window = t.stream_window;
  session_settings_.session_window = t.session_budget;
  session_settings_.keepalive_interval_ms = t.keepalive_interval_ms;
  session_settings_.keepalive_timeout_ms = t.keepalive_timeout_ms;
  session_settings_.handshake_timeout_ms = t.connect_timeout_ms;

  for (const PeerConfig& peer : config_->peers) {
    links_.push_back(
        std::make_unique<tunnel::PeerLink>(loop_, *pool_, peer, session_settings_, t, graveyard_, rdma_.get()));
  }
  for (size_t i = 0; i < sockets_.locals.size(); ++i) {
    const auto& local = sockets_.locals[i];
    size_t link = 0;
    for (size_t p = 0; p < config_->peers.size(); ++p)
      if (config_->peers[p].name == local.config->peer) link = p;
    listener_link_.push_back(link);
    int fd = local.fds.size() == 1 ? local.fds[0] : local.fds[index_];
    acceptors_.push_back(std::make_unique<Acceptor>(
        loop_, fd, local.config->name, [this, i](UniqueFd client) { on_local_accept(i, std::move(client)); }));
  }
  acceptors_.push_back(std::make_unique<Acceptor>(loop_, sockets_.tunnel_fds[index_], "tunnel",
                                                  [this](UniqueFd fd) { on_tunnel_accept(std::move(fd)); }));
  // RDMA CM has no SO_REUSEPORT: worker 0 accepts every inbound RDMA session.
  if (rdma_ && index_ == 0) {
    rdma_listener_ = std::make_unique<transport::RdmaListener>(
        loop_, [this](rdma_cm_id* id, const uint8_t* data, size_t len) { on_rdma_connect_request(id, data, len); });
    auto at = make_tcp_endpoint(t.address, t.rdma_port, error);
    if (!at || !rdma_listener_->listen(*at, error)) {
      *error = "tunnel.rdma_port: " + *error;
      return false;
    }
  }
  return true;
}

void Worker::on_rdma_connect_request(rdma_cm_id* id, const uint8_t* data, size_t len) {
  if (draining_) {
    rdma_reject(id, nullptr, 0);
    rdma_destroy_id(id);
    return;
  }
  std::string error;
  if (!transport::RdmaTransport::accept(loop_, *rdma_, id, data, len, config_->tunnel.buffer_size, this, &error))
    log::warn("rdma_accept_failed").kv("reason", error);
}

void Worker::on_rdma_established(transport::RdmaTransport* transport) { adopt_inbound(transport); }

void Worker::on_rdma_failed(transport::RdmaTransport* transport, std::string_view reason) {
  log::warn("rdma_accept_failed").kv("remote", transport->remote_address()).kv("reason", reason);
}

void Worker::run() {
  log::set_thread_worker(static_cast<int>(index_));
  for (auto& a : acceptors_) a->start();
  for (auto& link : links_) link->start();
  loop_.run(kTick, [this] { tick(); });
}

void Worker::on_local_accept(size_t listener_index, UniqueFd fd) {
  const ListenerConfig& l = *sockets_.locals[listener_index].config;
  if (l.transparent) {
    on_transparent_accept(l, std::move(fd));
    return;
  }
  auto* stream = local::LocalStream::from_client(*host_, std::move(fd), l.name, l.peer, l.target.to_string());
  links_[listener_link_[listener_index]]->submit(stream);
}

void Worker::on_transparent_accept(const ListenerConfig& l, UniqueFd fd) {
  // Where the application meant to go, before iptables REDIRECT sent it here.
  // io_uring's getsockopt serves SOL_SOCKET only, so this one is synchronous.
  sockaddr_storage dst{};
  socklen_t len = sizeof(dst);
  int rc = l.listen.addr.ss_family == AF_INET6
               ? getsockopt(fd.get(), SOL_IPV6, IP6T_SO_ORIGINAL_DST, &dst, &len)
               : getsockopt(fd.get(), SOL_IP, SO_ORIGINAL_DST, &dst, &len);
  auto reject = [&](std::string_view reason, const std::string& destination) {
    log::warn("stream_rejected").kv("listener", l.name).kv("destination", destination).kv("reason", reason);
    linger lg{1, 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  };
  if (rc != 0) {
    reject(std::string("no original destination (not redirected by iptables?): ") + strerror(errno), "?");
    return;
  }
  std::string destination = sockaddr_to_string(reinterpret_cast<sockaddr*>(&dst), len);
  for (const RouteConfig& route : l.routes) {
    if (!route.match.matches(reinterpret_cast<sockaddr*>(&dst))) continue;
    switch (route.action) {
      case RouteConfig::Action::kReject:
        reject("route " + route.match.to_string() + " says reject", destination);
        return;
      case RouteConfig::Action::kPassthrough:
        local::DirectPipe::start(*host_, std::move(fd), dst, len, l.name);
        return;
      case RouteConfig::Action::kTunnel: {
        std::string target = route.has_target ? route.target.to_string() : "tcp:" + destination;
        for (size_t p = 0; p < config_->peers.size(); ++p) {
          if (config_->peers[p].name != route.peer) continue;
          log::debug("stream_routed").kv("listener", l.name).kv("destination", destination).kv("peer", route.peer);
          links_[p]->submit(local::LocalStream::from_client(*host_, std::move(fd), l.name, route.peer, target));
          return;
        }
        reject("route names an unknown peer", destination);
        return;
      }
    }
  }
  reject("no route matches", destination);
}

void Worker::on_tunnel_accept(UniqueFd fd) {
  set_nodelay(fd.get());
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getpeername(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  std::string remote = sockaddr_to_string(reinterpret_cast<sockaddr*>(&ss), len);
  adopt_inbound(new transport::TcpTransport(loop_, *pool_, std::move(fd), config_->tunnel.buffer_size, remote));
}

void Worker::adopt_inbound(tunnel::Transport* transport) {
  inbound_.push_back(std::make_unique<tunnel::Session>(loop_, *pool_, tunnel::Session::Role::kAcceptor,
                                                       session_settings_, transport, this));
  tunnel::Session* session = inbound_.back().get();
  if (draining_) session->send_goaway();
  session->start();
}

void Worker::on_session_open(tunnel::Session&) {}

void Worker::on_session_closed(tunnel::Session& session, std::string_view) {
  for (auto& s : inbound_) {
    if (s.get() == &session) {
      graveyard_.push_back(std::move(s));
      break;
    }
  }
  std::erase(inbound_, nullptr);
}

void Worker::on_goaway(tunnel::Session&) {
  // The dialer drains: its open streams finish here, it opens no more.
}

tunnel::StreamEndpoint* Worker::on_stream_open(tunnel::Session& session, uint32_t id, std::string_view target,
                                               tunnel::ResetCode* refuse) {
  std::string error;
  auto endpoint = parse_endpoint(target, &error);
  if (!endpoint || !config_->target_allowed(*endpoint)) {
    log::warn("stream_refused")
        .kv("peer", session.peer_node())
        .kv("stream", id)
        .kv("target", target)
        .kv("reason", "not-allowed")
        .kv("detail", endpoint ? std::string("target is not in targets") : error);
    *refuse = tunnel::ResetCode::kNotAllowed;
    return nullptr;
  }
  return local::LocalStream::to_target(*host_, session, id, *endpoint, refuse);
}

void Worker::begin_drain() {
  draining_ = true;
  drain_deadline_ = loop_.now() + std::chrono::milliseconds(config_->shutdown_timeout_ms);
  log::info("drain_started").kv("streams", host_->live_streams).kv("timeout_ms", config_->shutdown_timeout_ms);
  for (auto& a : acceptors_) a->stop();
  if (rdma_listener_) rdma_listener_->stop();
  // Close this worker's own listening sockets now so that new connections
  // are refused rather than left in a backlog nobody accepts from.
  for (auto& local : sockets_.locals) {
    if (local.fds.size() > 1 || sockets_.worker_count == 1) {
      int& fd = local.fds.size() > 1 ? local.fds[index_] : local.fds[0];
      close_unix_listener(fd, local.config->listen);
      fd = -1;
    }
  }
  ::close(sockets_.tunnel_fds[index_]);
  sockets_.tunnel_fds[index_] = -1;
  if (sockets_.drained_workers.fetch_add(1) + 1 == sockets_.worker_count) sockets_.close_shared();
  for (auto& link : links_) link->begin_shutdown();
  for (auto& s : inbound_) s->send_goaway();
}

void Worker::close_everything(std::string_view reason) {
  for (auto& link : links_) link->close_all(reason);
  std::vector<tunnel::Session*> inbound;
  for (auto& s : inbound_) inbound.push_back(s.get());
  for (auto* s : inbound) s->close_gracefully(reason);
}

void Worker::tick() {
  graveyard_.clear();
  Clock::time_point now = loop_.now();
  for (auto& a : acceptors_) a->tick();
  for (auto& link : links_) link->tick(now);
  std::vector<tunnel::Session*> inbound;
  for (auto& s : inbound_) inbound.push_back(s.get());
  for (auto* s : inbound) s->tick(now);

  int level = stop_level_.load(std::memory_order_relaxed);
  if (level >= static_cast<int>(StopLevel::kDrain) && !draining_) begin_drain();
  if (!draining_) return;
  if (!closed_all_) {
    bool idle = host_->live_streams == 0;
    bool forced = level >= static_cast<int>(StopLevel::kNow);
    if (idle || forced || now >= drain_deadline_) {
      if (!idle) log::warn("drain_timeout").kv("streams_reset", host_->live_streams);
      close_everything(idle ? "shutdown" : "shutdown: drain timeout");
      closed_all_ = true;
      closed_at_ = now;
    }
    return;
  }
  // Give resets, closes and queued tunnel frames a moment to reach the wire.
  bool quiet = host_->live_streams == 0 && transport::TcpTransport::live_count() == 0;
  if (quiet || now - closed_at_ > std::chrono::seconds(2)) loop_.stop();
}

}  // namespace rdmagw
