// SPDX-License-Identifier: Apache-2.0
#pragma once
// A worker thread: one io_uring loop, one buffer slab, its own accepted
// connections and its own sessions to every peer. Nothing on the data path
// is shared with other workers, so nothing there takes a lock.
//
// The worker is where the layers are wired together: its listeners'
// connections go where its ConnectionRouter says, mostly as streams to its
// PeerLinks (tunnel/), which dial through the transports' connectors
// (transport/); the transports' listeners hand inbound tunnels to its
// InboundSessions, whose streams open where its PeerTargets allow. What
// remains here is that wiring and the worker's life: reload, drain and
// undrain, the takeover (worker_takeover.cc), the tick, and moving work
// between workers (RDMA connect requests, streams for a peer another worker
// holds).
//
// Why about 40 methods: half are the runtime's calls through the mailbox,
// one per step of a worker's life (start, reload, drain, undrain, the
// takeover's four steps, describe); the rest wire those steps to the parts
// above. worker_takeover.cc holds the takeover's.
#include <rdma/rdma_cma.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/buffer_pool.h"
#include "common/log_limiter.h"
#include "common/metrics.h"
#include "config/config.h"
#include "proxy/io/acceptor.h"
#include "proxy/io/event_loop.h"
#include "proxy/local/access_log.h"
#include "proxy/local/redirected_leg.h"
#include "proxy/local/stream_host.h"
#include "proxy/local/stream_info.h"
#include "proxy/runtime/connection_router.h"
#include "proxy/runtime/inbound_sessions.h"
#include "proxy/runtime/listener_sockets.h"
#include "proxy/runtime/peer_links.h"
#include "proxy/runtime/peer_targets.h"
#include "proxy/runtime/service_router.h"
#include "proxy/runtime/session_directory.h"
#include "proxy/runtime/takeover_image.h"
#include "proxy/runtime/worker_mailbox.h"
#include "proxy/transport/rdma/incoming_connect.h"
#include "proxy/transport/rdma/rdma_context.h"
#include "proxy/tunnel/peer_link.h"
#include "proxy/tunnel/session.h"
#include "proxy/tunnel/transport.h"
#include "proxy/tunnel/tunnel_info.h"

namespace rdmagw {

// What the workers share of the tunnel's accepting side, set up by main
// before the workers start; none of it changes on reload.
struct TunnelSockets {
  std::vector<int> tcp_fds;  // index: worker (SO_REUSEPORT); a worker closes its own when it drains
  // Decided once at startup (device present, memlock enough): RDMA in use.
  bool rdma = false;
  // Connections in their handshake, across workers (tunnel.limits).
  std::unique_ptr<tunnel::HandshakeBudget> handshakes;
};

enum class StopLevel : int { kRunning = 0, kDrain = 1, kNow = 2 };

class Worker final : private tunnel::InboundObserver {
 public:
  // `mailbox` and `metrics` outlive the worker (the runtime owns them, so
  // that the admin thread can use them at any time).
  // `access_log_file`: access_log.path's, shared by the workers (the
  // runtime opens it).
  Worker(unsigned index, std::shared_ptr<const Config> config, ListenerSet listeners, TunnelSockets& tunnel,
         const std::atomic<int>& stop_level, metrics::WorkerMetrics& metrics, WorkerMailbox& mailbox,
         SessionDirectory& directory, const local::AccessLogFile& access_log_file);
  ~Worker() override;

  bool init(std::string* error);
  void run();
  const LoopFeatures& features() const { return loop_.features(); }
  // Its RDMA sessions fill tunnel.rdma.max_pinned. Any thread may ask.
  bool rdma_full() const { return rdma_ && rdma_->at_transport_limit(); }
  unsigned index() const { return index_; }
  // --- called on the worker's thread, through the mailbox -------------------
  // A reload: adopt `config` and `listeners`. Listeners and peers that stay
  // keep their sockets and sessions; removed ones stop accepting / dialing
  // and their open streams finish; added ones start.
  void apply(std::shared_ptr<const Config> config, ListenerSet listeners);
  // POST /drain: stop accepting and tell peers; streams finish; keep running.
  void stop_accepting();
  // POST /undrain: accept again on `listeners` (opened anew by the runtime)
  // and on `tunnel_fd`, this worker's tunnel socket (taken; closed if this
  // worker is stopping instead). Links dial again when needed.
  void start_accepting(ListenerSet listeners, UniqueFd tunnel_fd);
  void describe_peers(std::vector<tunnel::PeerInfo>* out) const;
  // The services file changed (read by the main thread).
  void set_services(std::shared_ptr<const ServiceTable> table) { services_.set_table(std::move(table)); }
  // Open connections per Service endpoint (by ServiceTable::key), added to *out.
  void count_service_streams(ServiceRouter::OpenCounts* out) const { services_.count_open(out); }
  // The links `peer: destination` and Services made, by address: their
  // state (PeerLink::state_name) and last dial failure.
  using DiscoveredState = PeerLinks::DiscoveredState;
  void describe_discovered(std::vector<DiscoveredState>* out) const { links_->describe_discovered(out); }
  void describe_streams(std::vector<local::StreamInfo>* out) const;

  // --- a takeover (docs/operations.md, "Takeover") ----------------------------
  // Old process: stop accepting (the listening sockets go on in the new
  // process) and freeze every session and connection.
  void freeze_for_takeover();
  // Old process: once every connection is quiet, its image (sockets as
  // indexes into out->connections.fds, borrowed); false while not quiet yet.
  bool export_for_takeover(WorkerImage* out);
  // Old process: the takeover failed; everything carries on here.
  void thaw_after_takeover();
  // Old process: everything moved; let go of it without touching a socket,
  // and stop.
  void finish_takeover();
  // New process, before init(): what to rebuild. Each image's sockets are
  // taken from `fds` (shared by the workers; each takes its own).
  void import_on_init(std::vector<WorkerImage> images, std::shared_ptr<std::vector<UniqueFd>> fds) {
    imports_ = std::move(images);
    inherited_fds_ = std::move(fds);
  }
  // Before init(): the local legs go past TCP through `redirect` (the
  // process's; it outlives the worker).
  void redirect_local_legs(local::LocalRedirect& redirect) { local_redirect_ = &redirect; }

  // Another worker's connection asks to resume a session this worker holds
  // (InboundSessions::resume_elsewhere there); on this worker's thread.
  void adopt_resume(const ResumeHandOff& hand_off) { inbound_->adopt_resume(hand_off, frozen_); }

 private:
  // InboundObserver: a peer dialed us (either transport).
  void on_inbound(IoPtr<tunnel::Transport> transport) override;
  void tick();
  // After a reload swapped auth_keyring_: ends the sessions whose peers no
  // longer prove themselves with it (Session::recheck_peer).
  void recheck_peers();
  // Empty, or how `next` changes the proof this node gives (a new first
  // key, a new certificate) from the one auth_keyring_ holds.
  std::string own_proof_change(const Config& next) const;
  // Every open resumable session moves to a new transport and proves itself
  // again (Session::reauthenticate).
  void reauthenticate_sessions(const std::string& reason);
  // A listener as this worker serves it.
  struct LocalListener {
    std::shared_ptr<const ListenerSocket> socket;
    IoPtr<Acceptor> acceptor;
    metrics::ListenerMetrics* counters = nullptr;
    tunnel::PeerLink* link = nullptr;  // non-transparent listeners: where streams go
  };
  std::unique_ptr<LocalListener> make_listener(std::shared_ptr<const ListenerSocket> socket);
  // The listener was removed or we drain: stop listening and accepting.
  void retire_listener(LocalListener& listener);
  void on_local_accept(LocalListener& l, UniqueFd fd) {
    router_->on_accept(*l.socket, *l.counters, l.link, std::move(fd));
  }
  tunnel::HandshakeGate handshake_gate() { return tunnel::HandshakeGate(tunnel_.handshakes.get(), &metrics_); }
  void begin_drain();
  // Worker 0's RDMA listener: which worker accepts a connect request (see
  // make_tunnel_listeners). True when another worker takes it.
  bool place_rdma_request(const tunnel::SessionToken* session, transport::IncomingConnect& connect,
                          std::span<const uint8_t> data);
  // A connect request worker 0 placed here; rejected if nobody accepts it
  // (IncomingConnect's destructor).
  struct PlacedRdmaRequest {
    PlacedRdmaRequest(transport::IncomingConnect c, std::vector<uint8_t> d)
        : connect(std::move(c)), data(std::move(d)) {}
    std::optional<transport::IncomingConnect> connect;
    std::vector<uint8_t> data;
  };
  void accept_rdma(PlacedRdmaRequest& request);
  // tunnel.sessions_per_peer: a stream accepted here whose peer's session is
  // another worker's goes there (true: handed over, or reset if it could
  // not be). The other worker carries it as if it had accepted it.
  struct HandedStream {
    UniqueFd fd;
    std::string listener, peer, target;
    std::string destination;  // a transparent listener's: where the client meant to go
    local::ListenerTerms terms;
    // A Service endpoint's address: where to go if its tunnel port refuses
    // (length 0: not a Service stream).
    sockaddr_storage direct{};
    socklen_t direct_length = 0;
  };
  // ConnectionRouter::HandOver: `terms` move with the stream when it is
  // handed over.
  bool hand_over_stream(tunnel::PeerLink& link, UniqueFd& fd, const std::string& listener, const std::string& target,
                        local::ListenerTerms& terms, const std::string& destination, const sockaddr_storage* direct);
  void carry_handed_stream(HandedStream& stream);
  void import_image(const WorkerImage& image);
  UniqueFd take_inherited(uint32_t index);
  // The tunnel's listeners of this worker (at init, after a failed takeover,
  // on undrain). `retry_rdma`: an RDMA port that cannot be bound is tried
  // again every second rather than failing.
  bool make_tunnel_listeners(std::string* error, bool retry_rdma = false);
  void close_everything(std::string_view reason, tunnel::CloseMode mode);

  unsigned index_;
  std::shared_ptr<const Config> config_;
  ListenerSet initial_listeners_;  // served from init() on
  TunnelSockets& tunnel_;
  const std::atomic<int>& stop_level_;
  metrics::WorkerMetrics& metrics_;
  local::AccessLog access_log_;
  WorkerMailbox& mailbox_;
  SessionDirectory& directory_;

  // Declared before loop_ so that it is destroyed after it: the ring must be
  // gone before the memory its pending receives point into is unmapped.
  std::unique_ptr<BufferPool> pool_;
  // After pool_ (its MR covers the slab) and before loop_.
  std::unique_ptr<transport::RdmaContext> rdma_;
  // Before loop_: the streams' redirected legs point into it until they go.
  local::LocalRedirect* local_redirect_ = nullptr;
  std::unique_ptr<local::LegRedirector> redirector_;
  EventLoop loop_;
  // After loop_: destroyed first, returning its buffers to pool_.
  ProvidedBuffers receive_ring_;
  std::unique_ptr<local::StreamHost> host_;
  tunnel::AuthKeyring auth_keyring_;  // session_settings_.auth points here
  // A takeover's connection of listener `name`: counted there, never refused.
  local::ListenerTerms adopted_terms(const std::string& name);
  // Lines about accepted tunnel connections whose peer was never admitted.
  log::LogLimiter handshake_log_{5, 20};
  tunnel::SessionSettings session_settings_;
  // The transports, behind the tunnel's seam.
  std::unique_ptr<tunnel::Connector> tcp_connector_;
  std::unique_ptr<tunnel::Connector> rdma_connector_;  // null without RDMA
  std::vector<std::unique_ptr<tunnel::TransportListener>> tunnel_listeners_;
  std::vector<std::unique_ptr<LocalListener>> listeners_;
  std::unique_ptr<PeerLinks> links_;          // the links this worker dials peers with (made by init())
  ServiceRouter services_;                    // `action: service` routes
  std::unique_ptr<PeerTargets> targets_;      // which targets peers may open (made by init())
  std::unique_ptr<ConnectionRouter> router_;  // where accepted connections go (made by init())
  std::unique_ptr<InboundSessions> inbound_;  // sessions peers dialed to us (made by init())
  std::vector<WorkerImage> imports_;
  std::shared_ptr<std::vector<UniqueFd>> inherited_fds_;
  unsigned next_rdma_worker_ = 0;  // worker 0: where the next new RDMA session goes
  uint64_t ticks_ = 0;
  bool frozen_ = false;  // a takeover is under way
  bool accepting_ = true;
  bool draining_ = false;
  bool closed_all_ = false;
  Clock::time_point drain_deadline_;
  Clock::time_point closed_at_;
};

}  // namespace rdmagw
