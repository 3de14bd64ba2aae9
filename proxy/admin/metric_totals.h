// SPDX-License-Identifier: Apache-2.0
#pragma once
// The process-wide view of the per-worker counters: every WorkerMetrics
// summed, listeners and peers matched by name and merged with the
// configuration. /stats and /metrics both render from one MetricTotals, so
// the two never disagree about what a number means.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "config/config.h"

namespace rdmagw::admin {

struct HistogramTotals {
  // Per-bucket (not cumulative) counts; the last one is the overflow (+Inf).
  std::array<uint64_t, metrics::Histogram::kBuckets + 1> buckets{};
  // The sum of `buckets`, so that the +Inf bucket equals _count exactly, as
  // Prometheus requires, however the workers' counts move while we read.
  uint64_t count = 0;
  uint64_t sum_us = 0;
};

struct ListenerTotals {
  std::string name;
  std::string listen;       // as configured; "" when no longer configured
  bool configured = false;  // in the configuration in effect
  uint64_t accepted = 0;
  int64_t active = 0;
  uint64_t bytes_received = 0;  // from applications
  uint64_t bytes_sent = 0;      // to applications
  uint64_t refused_max_connections = 0;
  uint64_t refused_accept_rate = 0;
  uint64_t idle_closed = 0;
};

struct PeerTotals {
  std::string name;
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t bytes_queued = 0;
  uint64_t streams_opened = 0;
  uint64_t credit_stalls = 0;
  uint64_t reconnects = 0;
  int64_t sessions_tcp = 0, sessions_rdma = 0;
  int64_t rtt_us = 0;  // the slowest worker's last keepalive round trip (0: none yet)
};

// One worker's share: how evenly the kernel (TCP) and worker 0's placement
// (RDMA) spread sessions and streams.
struct WorkerTotals {
  unsigned worker = 0;
  int64_t sessions_tcp = 0, sessions_rdma = 0;  // both roles
  uint64_t bytes_sent = 0, bytes_received = 0;  // stream payload to / from peers
  int64_t streams_active = 0;                   // client side plus target side
  int64_t buffer_bytes_in_use = 0;              // its buffer pool: holding bytes now
  int64_t buffer_bytes_posted = 0;              // ... lent to the kernel's receive ring
  uint64_t buffer_bytes_resident = 0;           // its buffer pool's slab: resident now (mincore)
};

struct MetricTotals {
  // Configured listeners (peers) first, in configuration order, even before
  // their first connection (session); then those only the counters know
  // (removed by a reload, peers that dialed us), in name order.
  std::vector<ListenerTotals> listeners;
  std::vector<PeerTotals> peers;
  std::vector<WorkerTotals> workers;  // by index
  uint64_t streams_opened_outbound = 0;
  uint64_t streams_opened_inbound = 0;
  int64_t target_streams_active = 0;
  std::array<uint64_t, static_cast<size_t>(metrics::StreamFailure::kCount)> streams_failed{};
  uint64_t rdma_send_completions = 0, rdma_recv_completions = 0;
  // [from][to], by metrics::kTransportKinds index.
  std::array<std::array<uint64_t, metrics::kTransportKinds>, metrics::kTransportKinds> session_resumes{};
  std::array<std::array<uint64_t, static_cast<size_t>(metrics::TransportLoss::kCount)>, metrics::kTransportKinds>
      transport_losses{};
  uint64_t stream_resume_failures = 0, resent_bytes = 0;
  std::array<uint64_t, static_cast<size_t>(AuthFailure::kCount)> auth_failures{};
  uint64_t handshakes_refused = 0;
  uint64_t sessions_idle_closed = 0, sessions_evicted = 0, sessions_refused = 0;
  uint64_t address_sessions_closed = 0, address_sessions_refused = 0;
  uint64_t sessions_revoked = 0;
  uint64_t streams_handed_over = 0;
  uint64_t rdma_budget_evicted = 0, rdma_budget_tcp = 0, rdma_budget_refused = 0, rdma_budget_rejected = 0;
  uint64_t access_log_lines = 0, access_log_suppressed = 0;
  HistogramTotals stream_open, target_connect, session_rtt;

  // Streams open now: client side (listeners' active) plus target side.
  int64_t streams_active() const;
};

// `config` may be null (nothing configured is then listed). Null entries of
// `workers` are skipped.
MetricTotals sum_metrics(const Config* config, const std::vector<const metrics::WorkerMetrics*>& workers);

// The listen address as written in the configuration: "tcp:IP:PORT",
// "unix:PATH" or, for a transparent listener, "transparent:IP:PORT".
std::string listen_address_text(const ListenerConfig& listener);

}  // namespace rdmagw::admin
