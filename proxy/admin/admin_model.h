#pragma once
// What the admin endpoint reports, as plain structs: the runtime fills them
// (workers answer through their mailboxes, counters are read directly) and
// the admin thread renders them as JSON or Prometheus text. The schemas are
// in docs/admin.md.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "config/config.h"

namespace rdmagw::admin {

// One tunnel session of one worker.
struct SessionInfo {
  unsigned worker = 0;
  std::string role;            // "dialer" (we dialed the peer) | "acceptor" (the peer dialed us)
  std::string transport;       // "tcp" | "rdma"
  std::string state;           // "handshake" | "open" | "draining" (GOAWAY either way)
  std::string remote_address;  // the peer sidecar's tunnel address
  std::string peer_node;       // node name from the peer's HELLO ("" before it)
  int64_t rtt_us = -1;         // last keepalive round trip; -1 before the first
  uint64_t age_ms = 0;
  uint64_t streams = 0;        // open now
  uint64_t streams_opened = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;  // stream payload
  uint64_t credit_stalls = 0;
  // RDMA sessions only (has_rdma): the queue pair and its credits.
  bool has_rdma = false;
  std::string qp_state;        // "RTS", "ERR", ... (ibv_query_qp)
  uint32_t send_credits = 0;   // peer receives we may still use
  uint32_t peer_recv_depth = 0;
  uint32_t pending_returns = 0;  // credits we owe the peer
  uint32_t sends_in_flight = 0;
  uint64_t completions = 0;
};

// One peer, merged over workers. Configured peers are listed even while no
// session is up; peers that dialed us appear under their node name.
struct PeerInfo {
  std::string name;
  bool configured = false;     // in peers: (we dial it)
  std::string address;         // configured: "IP" with the two ports below
  uint16_t tcp_port = 0, rdma_port = 0;
  std::string transport;       // in use (or to be tried next): "tcp" | "rdma" | "" (inbound only)
  std::string transport_reason;  // why that transport
  std::string state;           // "up" | "connecting" | "down" | "removed" (draining after a reload)
  std::string last_error;      // last dial failure, "" if none
  uint64_t waiting_streams = 0;  // streams queued for a session
  std::vector<SessionInfo> sessions;
};

// One active stream.
struct StreamInfo {
  unsigned worker = 0;
  std::string side;      // "client" (an application connected to a listener) | "target" (the peer opened it)
  std::string listener;  // client side: listener name; target side: ""
  std::string peer;      // peer name (client side) or peer node (target side)
  std::string target;
  uint32_t stream_id = 0;  // 0 while waiting for a session
  uint64_t age_ms = 0;
  uint64_t bytes_from_app = 0;  // read from the local socket, sent into the tunnel
  uint64_t bytes_to_app = 0;    // received from the tunnel, written to the local socket
  std::string state;     // "waiting" | "connecting" | "open" | "half-closed"
};

struct ReloadResult {
  bool ok = false;
  uint64_t generation = 0;           // the config generation this reload made (ok only)
  std::vector<std::string> errors;   // "FILE:LINE:COL: key: message", or a plain reason
  std::vector<std::string> changes;  // "listener redis added", "peer b removed", ...
};

struct Status {
  std::string version;
  std::string node;
  std::string config_file;
  uint64_t config_generation = 0;  // 1 at start, +1 per applied reload
  double uptime_seconds = 0;
  bool ready = false;
  std::string not_ready_reason;    // when !ready
  bool draining = false;
  unsigned workers = 0;
  std::string transport;           // "tcp" | "rdma" | "rdma,tcp"
  std::string transport_reason;
  std::string io_uring;            // features in use
  ReloadResult last_reload;        // empty errors/changes before the first
  double last_reload_unix = 0;     // 0: never
};

// The runtime, as the admin thread sees it. Every call is made from the
// admin thread and may block briefly (workers answer within a loop turn).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual Status status() = 0;
  virtual std::shared_ptr<const Config> config() = 0;
  // One entry per worker, for the admin thread to read (see metrics.h).
  virtual std::vector<const metrics::WorkerMetrics*> worker_metrics() = 0;
  virtual const metrics::ProcessMetrics& process_metrics() = 0;
  // False with *error set when a worker did not answer in time.
  virtual bool peers(std::vector<PeerInfo>* out, std::string* error) = 0;
  virtual bool streams(std::vector<StreamInfo>* out, std::string* error) = 0;
  virtual ReloadResult reload() = 0;
  // Stop accepting, tell peers, let open streams finish; the process stays
  // up (not ready) until SIGTERM. Returns the streams still open.
  virtual uint64_t drain() = 0;
};

}  // namespace rdmagw::admin
