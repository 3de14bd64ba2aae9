#pragma once
// A worker thread: one io_uring loop, one buffer slab, its own accepted
// connections and its own sessions to every peer. Nothing on the data path
// is shared with other workers, so nothing there takes a lock.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/buffer_pool.h"
#include "config/config.h"
#include "proxy/local/stream_host.h"
#include "proxy/runtime/acceptor.h"
#include "proxy/runtime/event_loop.h"
#include "proxy/transport/rdma/rdma_context.h"
#include "proxy/transport/rdma/rdma_listener.h"
#include "proxy/transport/rdma/rdma_transport.h"
#include "proxy/tunnel/peer_link.h"
#include "proxy/tunnel/session.h"

namespace rdmagw {

// Listening sockets opened by main before the workers start, so that bind
// errors are reported once, clearly, before anything runs.
struct ListenSockets {
  struct Local {
    const ListenerConfig* config;
    std::vector<int> fds;  // one per worker (TCP, SO_REUSEPORT) or one shared (unix)
  };
  std::vector<Local> locals;
  std::vector<int> tunnel_fds;  // one per worker, SO_REUSEPORT
  // Workers close their own sockets when they start draining; the last one
  // to drain closes the shared ones, so new connections are refused at once.
  std::atomic<unsigned> drained_workers{0};
  unsigned worker_count = 0;
  // Decided once at startup (device present, memlock enough): RDMA in use.
  bool rdma = false;
  void close_shared();
};

enum class StopLevel : int { kRunning = 0, kDrain = 1, kNow = 2 };

class Worker final : public tunnel::SessionOwner, public transport::RdmaTransport::Observer {
 public:
  Worker(unsigned index, std::shared_ptr<const Config> config, ListenSockets& sockets,
         const std::atomic<int>& stop_level);
  ~Worker() override;

  bool init(std::string* error);
  void run();
  const LoopFeatures& features() const { return loop_.features(); }

  // SessionOwner, for sessions peers dialed to us.
  void on_session_open(tunnel::Session& session) override;
  void on_session_closed(tunnel::Session& session, std::string_view reason) override;
  void on_goaway(tunnel::Session& session) override;
  tunnel::StreamEndpoint* on_stream_open(tunnel::Session& session, uint32_t id, std::string_view target,
                                         tunnel::ResetCode* refuse) override;

  // RdmaTransport::Observer, for sessions peers dial to us over RDMA.
  void on_rdma_established(transport::RdmaTransport* transport) override;
  void on_rdma_failed(transport::RdmaTransport* transport, std::string_view reason) override;

 private:
  void on_rdma_connect_request(rdma_cm_id* id, const uint8_t* data, size_t len);
  void adopt_inbound(tunnel::Transport* transport);
  void tick();
  void on_local_accept(size_t listener_index, UniqueFd fd);
  void on_transparent_accept(const ListenerConfig& listener, UniqueFd fd);
  void on_tunnel_accept(UniqueFd fd);
  void begin_drain();
  void close_everything(std::string_view reason);

  unsigned index_;
  std::shared_ptr<const Config> config_;
  ListenSockets& sockets_;
  const std::atomic<int>& stop_level_;

  // Declared before loop_ so that it is destroyed after it: the ring must be
  // gone before the memory its pending receives point into is unmapped.
  std::unique_ptr<BufferPool> pool_;
  // After pool_ (its MR covers the slab) and before loop_.
  std::unique_ptr<transport::RdmaContext> rdma_;
  EventLoop loop_;
  std::unique_ptr<transport::RdmaListener> rdma_listener_;
  std::unique_ptr<local::StreamHost> host_;
  tunnel::SessionSettings session_settings_;
  std::vector<std::unique_ptr<Acceptor>> acceptors_;
  std::vector<std::unique_ptr<tunnel::PeerLink>> links_;        // index matches config_->peers
  std::vector<size_t> listener_link_;                           // listener index -> links_ index
  std::vector<std::unique_ptr<tunnel::Session>> inbound_;       // sessions peers dialed to us
  tunnel::SessionGraveyard graveyard_;
  bool draining_ = false;
  bool closed_all_ = false;
  Clock::time_point drain_deadline_;
  Clock::time_point closed_at_;
};

}  // namespace rdmagw
