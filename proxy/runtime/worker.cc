// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/worker.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <system_error>
#include <utility>

#include "common/log.h"
#include "common/socket_options.h"
#include "proxy/local/access_log.h"
#include "proxy/local/direct_pipe.h"
#include "proxy/local/local_stream.h"
#include "proxy/runtime/process_instance.h"
#include "proxy/transport/rdma/rdma_connector.h"
#include "proxy/transport/tcp/tcp_connector.h"
#include "proxy/transport/tcp/tcp_transport.h"

namespace rdmagw {

namespace {
// Virtual size of a worker's slab, in buffers. Pages are touched only when
// used, so this bounds memory without costing any up front.
constexpr size_t kSlabBuffers = 65536;
// Buffers lent to the kernel for socket receives (ProvidedBuffers; at most an
// eighth of the slab). Receives in flight at the same moment beyond these
// fall back to poll-then-read; idle streams use none.
constexpr unsigned kReceiveRingBuffers = 256;
constexpr unsigned kTrimEveryTicks = 20;  // ticks are 50 ms
constexpr size_t kWarmBuffers = 64;       // free buffers never trimmed: the ones used last
constexpr auto kTick = std::chrono::milliseconds(50);
// Where this node's dials come from. In mode cert a peer checks that the
// address a dialer connects from is in its certificate, which lists
// tunnel.address (--check): dialling from there, rather than from whatever
// the route picks on a host with several addresses, keeps that true. Not
// for a wildcard tunnel.address, and not in the other modes (a node that
// only dials may leave tunnel.address at its loopback default).
std::optional<Endpoint> dial_source(const TunnelConfig& t) {
  if (t.auth.mode != AuthMode::kCert) return std::nullopt;
  std::string error;
  std::optional<Endpoint> source = make_tcp_endpoint(t.address, 0, &error);
  if (!source) return std::nullopt;
  const sockaddr* sa = reinterpret_cast<const sockaddr*>(&source->addr);
  bool wildcard = sa->sa_family == AF_INET6
                      ? IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr)
                      : reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr == htonl(INADDR_ANY);
  if (wildcard) return std::nullopt;
  return source;
}
}  // namespace

Worker::Worker(unsigned index, std::shared_ptr<const Config> config, ListenerSet listeners, TunnelSockets& tunnel,
               const std::atomic<int>& stop_level, metrics::WorkerMetrics& metrics, WorkerMailbox& mailbox,
               SessionDirectory& directory, const local::AccessLogFile& access_log_file)
    : index_(index),
      config_(std::move(config)),
      initial_listeners_(std::move(listeners)),
      tunnel_(tunnel),
      stop_level_(stop_level),
      metrics_(metrics),
      access_log_(access_log_file, metrics, index),
      mailbox_(mailbox),
      directory_(directory) {
  directory_.set_worker(index_, this);
}

Worker::~Worker() {
  // Claims first: another worker must not hand a stream to one going away.
  if (links_) links_->release_claims();
  directory_.set_worker(index_, nullptr);
  // GET /stats must not ask about a slab that is going away (one that reads
  // the address just before this gets 0 from mincore once it is unmapped).
  metrics_.set_buffer_slab(nullptr, 0);
  metrics_.buffer_bytes_in_use.set(0);
  // Owners let go first, while the ring still runs (closing may submit
  // cancels); then the loop ends the ring and deletes what is left.
  close_everything("worker stopped", tunnel::CloseMode::kAbort);
  if (host_) host_->reset_all("worker stopped");
  listeners_.clear();
  tunnel_listeners_.clear();
  links_.reset();
  inbound_.reset();
  loop_.shut_down();
}

bool Worker::init(std::string* error) {
  log::set_thread_worker(static_cast<int>(index_));
  if (!loop_.init(4096, error)) return false;
  const TunnelConfig& t = config_->tunnel;
  size_t stride = tunnel::kBufferHeadroom + t.buffer_size;
  // With RDMA the slab is registered, i.e. pinned: its size is the operator's
  // choice (tunnel.rdma.slab_size). Without, it is reserved lazily and large.
  size_t buffers = tunnel_.rdma ? std::max<size_t>(t.rdma.slab_size / ((stride + 63) & ~size_t{63}), 64) : kSlabBuffers;
  try {
    // Registered (RDMA) slabs keep their pages; others give unused ones back.
    pool_ = std::make_unique<BufferPool>(stride, buffers, /*trimmable=*/!tunnel_.rdma);
  } catch (const std::system_error& e) {
    // Address space, not memory: the slab is reserved, not touched. A
    // `ulimit -v` or vm.overcommit_memory=2 refuses it.
    *error = std::string(e.what()) + " (is `ulimit -v` or vm.overcommit_memory=2 in the way? each worker reserves " +
             std::to_string(stride * buffers >> 20) + " MiB)";
    return false;
  }
  metrics_.set_buffer_slab(pool_->base(), pool_->residency_extent());
  if (tunnel_.rdma) rdma_ = std::make_unique<transport::RdmaContext>(*pool_, t.rdma, &metrics_);
  host_ = std::make_unique<local::StreamHost>(
      local::StreamHost{loop_, *pool_, metrics_, index_, t.buffer_size, t.connect_timeout_ms});
  access_log_.configure(config_->access_log, config_->node);
  host_->access_log = &access_log_;
  if (local_redirect_) {
    redirector_ = std::make_unique<local::LegRedirector>(local::LegRedirector{*local_redirect_, {}});
    std::string why;
    if (redirector_->memory.open(&why)) {
      host_->redirector = redirector_.get();
    } else {
      // Unpaced sends would have no bound: this worker's legs stay on TCP.
      log::warn("local_legs_unavailable").kv("worker", index_).kv("reason", why).kv("legs", "tcp");
      redirector_.reset();
    }
  }
  // Idle streams then hold no buffer (docs/architecture.md, "Memory per
  // connection"). Without buffer rings the streams poll, then read.
  std::string no_ring;
  if (receive_ring_.init(loop_, *pool_, kReceiveRingBuffers, tunnel::kBufferHeadroom, t.buffer_size, &no_ring)) {
    host_->receive_ring = &receive_ring_;
    loop_.set_buffer_ring(true);
  } else if (index_ == 0) {
    log::info("receive_buffers").kv("mode", "poll-then-read").kv("reason", no_ring);
  }

  session_settings_.node = config_->node;
  // The keys sessions read are restart-only: set once. Without tunnel.auth:
  // sessions prove themselves with auth_keyring_, which reloads swap, and a
  // key a rotation retired must not live on here.
  auto session_keys = std::make_shared<TunnelConfig>(t);
  session_keys->auth = {};
  session_settings_.tunnel = std::move(session_keys);
  session_settings_.instance = process_instance();
  session_settings_.metrics = &metrics_;
  session_settings_.handshake_log = &handshake_log_;
  auth_keyring_.keys = t.auth.mode == AuthMode::kPsk ? t.auth.keys : nullptr;
  auth_keyring_.credentials = t.auth.mode == AuthMode::kCert ? t.auth.credentials : nullptr;
  auth_keyring_.encrypt = t.auth.encrypt;
  session_settings_.auth = &auth_keyring_;
  // rdmagw's own ports are restart-only: set once.
  std::vector<uint16_t> own_ports = {t.tcp_port, t.rdma_port};
  std::string unused;
  if (auto admin = parse_host_port(config_->admin, &unused)) own_ports.push_back(endpoint_port(*admin));
  targets_ = std::make_unique<PeerTargets>(PeerTargets::Wiring{loop_, *host_, metrics_, services_, config_},
                                           std::move(own_ports));
  inbound_ = std::make_unique<InboundSessions>(
      loop_, *pool_, session_settings_, index_, directory_, metrics_,
      [this](tunnel::Session& session, uint32_t id, std::string_view target, const tunnel::StreamOrigin* origin,
             tunnel::ResetCode* refuse) { return targets_->open(session, id, target, origin, refuse); });

  std::optional<Endpoint> source = dial_source(t);
  tcp_connector_ = std::make_unique<transport::TcpConnector>(loop_, *pool_, t.buffer_size, t.tcp_splice, source);
  if (rdma_) rdma_connector_ = std::make_unique<transport::RdmaConnector>(loop_, *rdma_, t.buffer_size, source);
  if (!make_tunnel_listeners(error)) return false;
  links_ = std::make_unique<PeerLinks>(PeerLinks::Wiring{loop_,
                                                         *pool_,
                                                         session_settings_,
                                                         {tcp_connector_.get(), rdma_connector_.get()},
                                                         rdma_.get(),
                                                         directory_,
                                                         index_,
                                                         metrics_},
                                       config_);
  router_ = std::make_unique<ConnectionRouter>(ConnectionRouter::Wiring{
      loop_, *host_, metrics_, *links_, services_, config_, ConnectionRouter::from_kernel(local_redirect_), *targets_,
      [this](tunnel::PeerLink& link, UniqueFd& fd, const std::string& listener, const std::string& target,
             local::ListenerTerms& terms, const std::string& destination, const sockaddr_storage* direct) {
        return hand_over_stream(link, fd, listener, target, terms, destination, direct);
      }});
  for (auto& socket : initial_listeners_) listeners_.push_back(make_listener(std::move(socket)));
  initial_listeners_.clear();
  for (const WorkerImage& image : imports_) import_image(image);
  imports_.clear();
  inherited_fds_.reset();
  return true;
}

bool Worker::make_tunnel_listeners(std::string* error, bool retry_rdma) {
  const TunnelConfig& t = config_->tunnel;
  tunnel_listeners_.clear();
  tunnel_listeners_.push_back(std::make_unique<transport::TcpTransportListener>(
      loop_, *pool_, tunnel_.tcp_fds[index_], t.buffer_size, t.tcp_splice, handshake_gate()));
  if (!rdma_) return true;
  // RDMA CM has no SO_REUSEPORT: worker 0 listens, and places each connect
  // request with a worker, which sets up the QP on its own device context
  // (a QP cannot move later): a resume with the worker holding the session,
  // a new session with the next worker in turn.
  auto listener = std::make_unique<transport::RdmaTransportListener>(loop_, *rdma_, t.buffer_size, handshake_gate());
  if (index_ == 0) {
    auto at = make_tcp_endpoint(t.address, t.rdma_port, error);
    if (at && retry_rdma) {
      listener->listen_or_retry(*at);
    } else if (!at || !listener->listen(*at, error)) {
      *error = "tunnel.rdma_port: " + *error;
      return false;
    }
    listener->set_placement(
        [this](const tunnel::SessionToken* session, transport::IncomingConnect& connect,
               std::span<const uint8_t> data) { return place_rdma_request(session, connect, data); });
  }
  tunnel_listeners_.push_back(std::move(listener));
  return true;
}

bool Worker::place_rdma_request(const tunnel::SessionToken* session, transport::IncomingConnect& connect,
                                std::span<const uint8_t> data) {
  unsigned workers = config_->workers;
  std::optional<unsigned> holder = session ? directory_.holder(*session) : std::nullopt;
  unsigned to = holder ? *holder : next_rdma_worker_++ % workers;
  // A new session skips the workers whose RDMA sessions fill
  // tunnel.rdma.max_pinned (if all do, the one in turn rejects it).
  for (unsigned tried = 0; !holder && tried < workers; ++tried, to = next_rdma_worker_++ % workers) {
    Worker* w = directory_.worker(to);
    if (!w || !w->rdma_full()) break;
  }
  if (to == index_) return false;
  Worker* target = directory_.worker(to);
  if (!target) return false;
  auto request =
      std::make_shared<PlacedRdmaRequest>(std::move(connect), std::vector<uint8_t>(data.begin(), data.end()));
  if (!directory_.post(to, [target, request] { target->accept_rdma(*request); })) {
    connect = std::move(*request->connect);  // still ours: the caller accepts it here
    return false;
  }
  log::debug("rdma_request_placed").kv("to_worker", to).kv("resume", holder.has_value());
  return true;
}

void Worker::accept_rdma(PlacedRdmaRequest& request) {
  if (!request.connect) return;
  transport::IncomingConnect connect = std::move(*request.connect);
  request.connect.reset();
  for (auto& t : tunnel_listeners_) {
    if (t->kind() != tunnel::TransportKind::kRdma) continue;
    static_cast<transport::RdmaTransportListener&>(*t).accept_request(std::move(connect), request.data.data(),
                                                                      request.data.size());
    return;
  }
  // No RDMA listener here now (a takeover under way): `connect` refuses it,
  // the dialer retries.
}

bool Worker::hand_over_stream(tunnel::PeerLink& link, UniqueFd& fd, const std::string& listener,
                              const std::string& target, local::ListenerTerms& terms, const std::string& destination,
                              const sockaddr_storage* direct) {
  // Only a link that has nothing here would dial: one with a session, a
  // dial or waiting streams takes the stream itself.
  if (config_->tunnel.sessions_per_peer == 0 || !link.finished() || links_->may_hold_session(link)) return false;
  std::optional<unsigned> to = directory_.peer_holder(link.name(), index_);
  Worker* target_worker = to ? directory_.worker(*to) : nullptr;
  if (!target_worker) return false;  // let go of meanwhile: carried here
  // If the task never runs (that worker stops), the socket closes with a reset.
  set_abortive_close(fd.get());
  auto handed = std::make_shared<HandedStream>(
      HandedStream{std::move(fd), listener, link.name(), target, destination, std::move(terms)});
  if (direct) {
    handed->direct = *direct;
    handed->direct_length = direct->ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  }
  if (!directory_.post(*to, [target_worker, handed] { target_worker->carry_handed_stream(*handed); })) {
    fd = std::move(handed->fd);  // still ours: carried here
    terms = std::move(handed->terms);
    return false;
  }
  metrics_.streams_handed_over.add();
  log::debug("stream_handed_over").kv("peer", link.name()).kv("to_worker", *to);
  return true;
}

void Worker::carry_handed_stream(HandedStream& handed) {
  if (!handed.fd.valid()) return;
  tunnel::PeerLink* link = accepting_ ? links_->find_or_discover(handed.peer) : nullptr;
  metrics::ListenerMetrics* counters = &metrics_.listener(handed.listener);
  if (!link) {
    counters->accepted.add();
    metrics_.failed(metrics::StreamFailure::kNoSession);
    log::warn("stream_failed")
        .kv("listener", handed.listener)
        .kv("peer", handed.peer)
        .kv("reason", accepting_ ? "the peer is no longer configured" : "draining");
    handed.fd.reset();  // abortive close armed: the application sees a reset
    return;
  }
  links_->claim_for_handed_stream(*link);
  if (handed.direct_length != 0 && links_->refused_recently(*link)) {
    counters->accepted.add();
    local::DirectPipe::start(*host_, std::move(handed.fd), handed.direct, handed.direct_length, handed.listener,
                             counters, {}, std::move(handed.terms));
    return;
  }
  auto* stream = local::LocalStream::from_client(*host_, std::move(handed.fd), handed.listener, counters, handed.peer,
                                                 handed.target, handed.destination, {}, std::move(handed.terms));
  if (handed.direct_length != 0) stream->reach_directly_if_refused(handed.direct, handed.direct_length);
  link->submit(stream);
}

void Worker::run() {
  log::set_thread_worker(static_cast<int>(index_));
  mailbox_.start(loop_);
  for (auto& l : listeners_) l->acceptor->start();
  for (auto& t : tunnel_listeners_) t->start(this);
  links_->start();
  loop_.run(kTick, [this] { tick(); });
  mailbox_.close();
}

std::unique_ptr<Worker::LocalListener> Worker::make_listener(std::shared_ptr<const ListenerSocket> socket) {
  auto local = std::make_unique<LocalListener>();
  LocalListener* l = local.get();
  l->socket = std::move(socket);
  l->counters = &metrics_.listener(l->socket->config.name);
  l->link = l->socket->config.transparent ? nullptr : links_->find(l->socket->config.peer);
  l->acceptor = make_io<Acceptor>(loop_, l->socket->fds->fd_for(index_), l->socket->config.name,
                                  [this, l](UniqueFd client) { on_local_accept(*l, std::move(client)); });
  return local;
}

void Worker::retire_listener(LocalListener& l) {
  // Stop listening now: until its cancelled accept completes, the ring still
  // holds the socket open, and a connection could land in a backlog that
  // nobody will accept from. Stopping first: this acceptor must ignore the
  // error its pending accept gets when the socket stops listening.
  l.acceptor->stop();
  l.socket->fds->stop_listening(index_);
  l.acceptor.reset();  // freed once its cancelled accept completes
}

local::ListenerTerms Worker::adopted_terms(const std::string& name) {
  local::ListenerTerms terms;
  for (const auto& l : listeners_) {
    if (l->socket->config.name != name) continue;
    l->socket->fds->load()->adopt();
    terms.slot = local::ListenerSlot(l->socket->fds->load());
    terms.idle_timeout_ms = l->socket->config.idle_timeout_ms;
    break;
  }
  return terms;
}

void Worker::apply(std::shared_ptr<const Config> config, ListenerSet listeners) {
  config_ = std::move(config);
  access_log_.configure(config_->access_log, config_->node);
  // Keys read again by the reload: handshakes from now on use them (the
  // mode itself never changes on reload, see config_diff.cc), and every
  // open session's peer must still prove itself with them.
  std::string own_change = own_proof_change(*config_);
  if (config_->tunnel.auth.mode == AuthMode::kPsk) auth_keyring_.keys = config_->tunnel.auth.keys;
  if (config_->tunnel.auth.mode == AuthMode::kCert) auth_keyring_.credentials = config_->tunnel.auth.credentials;
  recheck_peers();
  // What peers hold of our proof is about to be retired (the next step of
  // a rotation removes the old CA or key): open sessions prove again now.
  if (!own_change.empty()) reauthenticate_sessions("re-authenticating: " + own_change);
  // Peers: one whose address changed is a new peer; its old link finishes
  // the streams it carries, like a removed one.
  links_->apply(config_);
  if (!accepting_) return;  // drained: the listeners are closed until an undrain opens them
  // Listeners: the same sockets keep their acceptor (and the connections in
  // its backlog); only their settings change.
  std::vector<std::unique_ptr<LocalListener>> kept;
  for (auto& socket : listeners) {
    auto same = std::find_if(listeners_.begin(), listeners_.end(),
                             [&](const auto& l) { return l && l->socket->fds == socket->fds; });
    if (same == listeners_.end()) {
      kept.push_back(make_listener(socket));
      kept.back()->acceptor->start();
      continue;
    }
    LocalListener& l = **same;
    l.socket = socket;
    l.counters = &metrics_.listener(socket->config.name);
    l.acceptor->rename(socket->config.name);
    kept.push_back(std::move(*same));
  }
  for (auto& l : listeners_)
    if (l) retire_listener(*l);  // what was not moved to `kept` was removed
  listeners_ = std::move(kept);
  for (auto& l : listeners_) l->link = l->socket->config.transparent ? nullptr : links_->find(l->socket->config.peer);
}

void Worker::describe_peers(std::vector<tunnel::PeerInfo>* out) const {
  links_->for_each([&](const tunnel::PeerLink& link) {
    out->emplace_back();
    link.describe(index_, &out->back());
  });
  inbound_->for_each([&](const tunnel::Session& s) {
    tunnel::PeerInfo peer;
    tunnel::SessionInfo info;
    info.worker = index_;
    s.describe(&info);
    peer.name = info.peer_node.empty() ? info.remote_address : info.peer_node;
    peer.transport = info.transport;
    peer.transport_reason = "chosen by the peer, which dialed us";
    peer.state = s.open() ? "up" : "connecting";
    peer.sessions.push_back(std::move(info));
    out->push_back(std::move(peer));
  });
}

void Worker::describe_streams(std::vector<local::StreamInfo>* out) const {
  for (const local::LocalConnection* c = host_->first; c; c = c->next_in_host()) {
    local::StreamInfo info;
    if (c->describe(&info)) out->push_back(std::move(info));
  }
}

void Worker::on_inbound(IoPtr<tunnel::Transport> transport) {
  if (!accepting_) {
    transport->close(tunnel::CloseMode::kAbort);
    return;
  }
  inbound_->accept(std::move(transport));
}

void Worker::stop_accepting() {
  if (!accepting_) return;
  accepting_ = false;
  // Dropping our hold on the listening sockets closes them once every worker
  // and main let go, so new connections are refused rather than left in a
  // backlog nobody accepts from.
  for (auto& l : listeners_) retire_listener(*l);
  listeners_.clear();
  for (auto& t : tunnel_listeners_) t->stop();
  ::shutdown(tunnel_.tcp_fds[index_], SHUT_RDWR);
  ::close(tunnel_.tcp_fds[index_]);
  tunnel_.tcp_fds[index_] = -1;
  links_->begin_shutdown();
  inbound_->for_each([](tunnel::Session& s) { s.send_goaway(); });
}

void Worker::start_accepting(ListenerSet listeners, UniqueFd tunnel_fd) {
  // A drain by signal ends in a stop: it is not undone (nor is a takeover's
  // freeze). The socket opened for us then closes unused.
  if (accepting_ || draining_ || frozen_ || stop_level_.load() != static_cast<int>(StopLevel::kRunning)) return;
  accepting_ = true;
  tunnel_.tcp_fds[index_] = tunnel_fd.release();
  std::string error;
  if (!make_tunnel_listeners(&error, /*retry_rdma=*/true)) log::error("undrain_incomplete").kv("reason", error);
  for (auto& t : tunnel_listeners_) t->start(this);
  for (auto& socket : listeners) {
    listeners_.push_back(make_listener(socket));
    listeners_.back()->acceptor->start();
  }
  // Links dial again as streams need them; sessions that finished their
  // streams meanwhile are gone, the rest carry new streams as before.
  links_->end_shutdown();
}

void Worker::begin_drain() {
  draining_ = true;
  drain_deadline_ = loop_.now() + std::chrono::milliseconds(config_->shutdown_timeout_ms);
  log::info("drain_started").kv("streams", host_->live).kv("timeout_ms", config_->shutdown_timeout_ms);
  stop_accepting();
}

void Worker::close_everything(std::string_view reason, tunnel::CloseMode mode) {
  if (links_) links_->close_all(reason, mode);
  if (inbound_) inbound_->for_each([&](tunnel::Session& s) { s.close(tunnel::SessionEnd::kLocalClose, reason, mode); });
}

std::string Worker::own_proof_change(const Config& next) const {
  const AuthConfig& auth = next.tunnel.auth;
  if (auth.mode == AuthMode::kPsk && auth.keys && auth_keyring_.keys && !auth.keys->empty() &&
      !auth_keyring_.keys->empty() && auth.keys->id(0) != auth_keyring_.keys->id(0))
    return "this node proves itself with a new key (the first of tunnel.auth.key_files)";
  if (auth.mode == AuthMode::kCert && auth.credentials && auth_keyring_.credentials) {
    auto now = auth.credentials->certificate(), before = auth_keyring_.credentials->certificate();
    if (!std::equal(now.begin(), now.end(), before.begin(), before.end()))
      return "this node has a new certificate (tunnel.auth.cert_file)";
  }
  return {};
}

void Worker::reauthenticate_sessions(const std::string& reason) {
  size_t moved = 0;
  auto renew = [&](tunnel::Session& s) { moved += s.reauthenticate(reason) ? 1 : 0; };
  inbound_->for_each(renew);
  links_->for_each([&](tunnel::PeerLink& link) { link.for_each_session(renew); });
  if (moved) log::info("sessions_reauthenticating").kv("sessions", moved).kv("reason", reason);
}

void Worker::recheck_peers() {
  // Closing only queues the session's end: nothing here is freed meanwhile.
  inbound_->for_each([](tunnel::Session& s) { s.recheck_peer(); });
  links_->for_each([](tunnel::PeerLink& link) { link.for_each_session([](tunnel::Session& s) { s.recheck_peer(); }); });
}

void Worker::tick() {
  Clock::time_point now = loop_.now();
  for (auto& l : listeners_) l->acceptor->tick();
  for (auto& t : tunnel_listeners_) t->tick();
  links_->tick(now);
  receive_ring_.refill();  // slots left empty while the pool was dry
  // About once a second: pages of buffers unused for that long go back to
  // the kernel (TCP only), so RSS comes down after a burst.
  if (++ticks_ % kTrimEveryTicks == 0) {
    pool_->trim(kWarmBuffers);
    host_->check_idle(now);  // listeners[].idle_timeout_ms, to within a second
  }
  // Buffers handed out: those the kernel's receive ring holds for
  // receives to come (resident only once written), the rest holding bytes.
  size_t posted = std::min(receive_ring_.posted(), pool_->in_use());
  metrics_.buffer_bytes_posted.set(static_cast<int64_t>(posted * pool_->buffer_size()));
  metrics_.buffer_bytes_in_use.set(static_cast<int64_t>((pool_->in_use() - posted) * pool_->buffer_size()));
  // GET /stats asks the kernel about this much of the slab, so that
  // answering it stays cheap (a TCP worker's slab reserves gigabytes).
  metrics_.set_buffer_slab(pool_->base(), pool_->residency_extent());
  inbound_->for_each([&](tunnel::Session& s) { s.tick(now); });

  int level = stop_level_.load(std::memory_order_relaxed);
  if (level >= static_cast<int>(StopLevel::kDrain) && !draining_) begin_drain();
  if (!draining_) return;
  if (!closed_all_) {
    bool idle = host_->live == 0;
    bool forced = level >= static_cast<int>(StopLevel::kNow);
    if (idle || forced || now >= drain_deadline_) {
      if (!idle) log::warn("drain_timeout").kv("streams_reset", host_->live);
      // Streams still open are reset first, so that their RESET(shutdown)
      // frames go out with what the sessions queued; passthrough pipes too.
      // Then the sessions end cleanly.
      host_->reset_all("shutdown: drain timeout");
      close_everything(idle ? "shutdown" : "shutdown: drain timeout", tunnel::CloseMode::kFlush);
      closed_all_ = true;
      closed_at_ = now;
    }
    return;
  }
  // Give resets, closes and queued tunnel frames a moment to reach the wire:
  // every object with I/O in flight is gone once the loop has none alive.
  if (loop_.live_objects() == 0 || now - closed_at_ > std::chrono::seconds(2)) loop_.stop();
}

}  // namespace rdmagw
