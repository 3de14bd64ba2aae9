// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the tunnel layer tells about its peers and sessions, as plain structs
// (GET /peers). The admin endpoint renders them; the tunnel knows nothing of
// it. Schemas: docs/admin.md.
#include <cstdint>
#include <string>
#include <vector>

namespace rdmagw::tunnel {

// One tunnel session of one worker.
struct SessionInfo {
  unsigned worker = 0;
  std::string role;            // "dialer" (we dialed the peer) | "acceptor" (the peer dialed us)
  std::string transport;       // "tcp" | "rdma"
  std::string state;           // "handshake" | "open" | "resuming" | "draining" (GOAWAY either way)
  std::string remote_address;  // the peer sidecar's tunnel address
  std::string peer_node;       // node name from the peer's HELLO ("" before it)
  int64_t rtt_us = -1;         // last keepalive round trip; -1 before the first
  uint64_t age_ms = 0;
  uint64_t streams = 0;  // open now
  int64_t idle_ms = -1;  // on demand: how long it has carried no stream (-1: busy, or kept connected)
  uint64_t streams_opened = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;  // stream payload
  // Of bytes_received: what the application's socket did not take on
  // arrival, copied into the stream's queue (the rest went to the socket
  // straight from the transport's receive buffer).
  uint64_t queued_bytes = 0;
  uint64_t credit_stalls = 0;
  bool resumable = false;      // survives its transport (both sides offered resumption)
  uint64_t resumes = 0;        // transports it resumed on
  uint64_t resent_bytes = 0;   // session frame bytes sent again after resumes
  uint64_t spliced_bytes = 0;  // TCP: DATA payload bytes its transport received by splice
  // RDMA sessions only (has_rdma): the queue pair and its credits.
  bool has_rdma = false;
  std::string qp_state;       // "RTS", "ERR", ... (ibv_query_qp)
  uint32_t send_credits = 0;  // peer receives we may still use
  uint32_t peer_recv_depth = 0;
  uint32_t pending_returns = 0;  // credits we owe the peer
  uint32_t sends_in_flight = 0;
  uint64_t completions = 0;
};

// One peer, merged over workers. Configured peers are listed even while no
// session is up; peers that dialed us appear under their node name.
struct PeerInfo {
  std::string name;
  bool configured = false;  // in peers: (we dial it)
  std::string address;      // configured: "IP" with the two ports below
  uint16_t tcp_port = 0, rdma_port = 0;
  std::string transport;         // in use (or to be tried next): "tcp" | "rdma" | "" (inbound only)
  std::string transport_reason;  // why that transport
  // "up" | "connecting" | "down" | "removed" (draining after a reload) |
  // "idle" (on demand: no session, none needed)
  std::string state;
  bool discovered = false;       // found by a route's `peer: destination`
  std::string connect;           // dialled links: "always" | "on_demand"
  std::string last_close;        // why its last session ended ("END: reason"), "" if none has
  std::string last_error;        // last dial failure, "" if none
  uint64_t waiting_streams = 0;  // streams queued for a session
  std::vector<SessionInfo> sessions;
};

}  // namespace rdmagw::tunnel
