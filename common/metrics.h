// SPDX-License-Identifier: Apache-2.0
#pragma once
// Counters a worker keeps about itself, read by the admin thread on request.
// Each value has one writer (its worker); the admin thread only loads. So an
// update is a relaxed load and store on the owner's cache line, never a locked
// instruction, and a read may be a moment stale but never torn.
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "common/auth_failure.h"

namespace rdmagw::metrics {

class Counter {
 public:
  void add(uint64_t n = 1) { value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge {
 public:
  void add(int64_t n = 1) { value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  void sub(int64_t n = 1) { add(-n); }
  void set(int64_t n) { value_.store(n, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// Upper bounds of histogram buckets, in microseconds (rendered in seconds).
// One fixed set for every latency rdmagw measures: 50 µs to 10 s.
inline constexpr std::array<uint64_t, 17> kLatencyBucketsUs = {
    50,     100,     250,     500,     1'000,     2'500,     5'000,     10'000,    25'000,
    50'000, 100'000, 250'000, 500'000, 1'000'000, 2'500'000, 5'000'000, 10'000'000};

class Histogram {
 public:
  static constexpr size_t kBuckets = kLatencyBucketsUs.size();
  void observe_us(uint64_t us);
  // Per-bucket (not cumulative) counts; index kBuckets is the overflow (+Inf).
  // Their sum is the count.
  uint64_t bucket(size_t i) const { return buckets_[i].value(); }
  uint64_t sum_us() const { return sum_us_.value(); }

 private:
  std::array<Counter, kBuckets + 1> buckets_;
  Counter sum_us_;
};

// Why a stream ended before carrying data both ways as asked. The label
// values of rdmagw_streams_failed_total{reason=...}.
enum class StreamFailure : uint8_t {
  kNoSession,          // no session to the peer came up in time
  kNotAllowed,         // the peer refused the target (allowlist)
  kTargetRefused,      // the target refused the connection
  kTargetUnreachable,  // the target could not be reached or timed out
  kPeerGone,           // the session carrying it died
  kReset,              // an application reset it mid-stream
  kResource,           // out of buffers
  kProtocol,           // a stream-level protocol violation
  kShutdown,           // reset at the end of a drain
  kRejected,           // a transparent listener's route said reject / no route
  kLimit,              // beyond a limit: a peer's OPEN (tunnel.limits), a listener's accept (listeners[])
  kIdle,               // no byte either way for its listener's idle_timeout_ms
  kCount
};
std::string_view stream_failure_name(StreamFailure f);

// Why a session lost its transport (it then resumes on a new one, or ends).
// The label values of rdmagw_transport_failures_total{reason=...}.
enum class TransportLoss : uint8_t {
  kPeerClosed,        // the peer closed or disconnected it
  kKeepaliveTimeout,  // nothing received for tunnel.keepalive_timeout_ms
  kRetryExceeded,     // RDMA: the QP ran out of retries (packets lost, the peer unreachable)
  kCompletionError,   // RDMA: another work completion error
  kIoError,           // a send, receive, verbs or RDMA CM call failed
  kProtocolError,     // the peer sent what the transport cannot read
  kLocalError,        // out of memory or buffers here, or encryption failed
  kDeviceRemoved,     // RDMA: the device went away
  kCount
};
std::string_view transport_loss_name(TransportLoss loss);

// Transport kinds as metric indexes (tunnel::TransportKind's values).
inline constexpr size_t kTransportKinds = 2;  // 0: tcp, 1: rdma
std::string_view transport_index_name(size_t index);

// Per listener, client side.
struct ListenerMetrics {
  Counter accepted;        // connections accepted
  Gauge active;            // connections open now
  Counter bytes_received;  // from applications (into the tunnel)
  Counter bytes_sent;      // to applications (out of the tunnel)
  // Reset at accept past max_connections, or past accepts_per_second; and
  // connections ended by idle_timeout_ms.
  Counter refused_max_connections;
  Counter refused_accept_rate;
  Counter idle_closed;
};

// Per peer: a configured peer's name for sessions we dial, the peer's node
// name (from its HELLO) for sessions it dialed to us.
struct PeerMetrics {
  Counter bytes_sent;      // stream payload towards the peer
  Counter bytes_received;  // stream payload from the peer
  Counter bytes_queued;    // of those: copied into a stream's queue (the socket did not take them on arrival)
  Counter streams_opened;  // streams carried, both directions
  Counter credit_stalls;   // a stream waited for session credit
  Counter reconnects;      // sessions dialed after the first
  Gauge sessions_tcp, sessions_rdma;  // sessions open now, by transport
  Gauge rtt_us;                       // the last keepalive round trip of a session to it (0: none yet)
};

// Everything one worker counts. Listener and peer entries are created on
// first use (accept, session open) and never removed, so a pointer to one
// stays valid for the worker's life and the data path caches it.
class alignas(64) WorkerMetrics {
 public:
  static constexpr size_t kMaxPeers = 1024;  // beyond this, peers share kOtherPeers
  // Labels that no sensible node name looks like, so they never merge with one.
  static constexpr std::string_view kOtherPeers = "(other)";
  static constexpr std::string_view kUnnamedPeer = "(unnamed)";  // a HELLO with an empty node name

  Counter streams_opened_outbound;  // OPEN sent for an application's connection
  Counter streams_opened_inbound;   // OPEN accepted from a peer
  Gauge target_streams_active;      // streams peers opened, to targets here
  // Bytes of the worker's buffer pool handed out now (set every tick).
  Gauge buffer_bytes_in_use;  // holding bytes (queued, being sent or received)
  Gauge buffer_bytes_posted;  // lent to the kernel's receive ring, untouched until bytes arrive
  // The part of the pool's slab that can be resident (its
  // residency_extent), published by its worker every tick, so that
  // GET /stats can ask the kernel what of it is (BufferPool::resident_bytes):
  // what RSS owes to buffers; the rest of RSS is code, heap and stacks.
  void set_buffer_slab(const uint8_t* base, size_t bytes) {
    slab_bytes_.store(bytes, std::memory_order_relaxed);
    slab_base_.store(base, std::memory_order_release);
  }
  const uint8_t* buffer_slab_base() const { return slab_base_.load(std::memory_order_acquire); }
  size_t buffer_slab_bytes() const { return slab_bytes_.load(std::memory_order_relaxed); }
  std::array<Counter, static_cast<size_t>(StreamFailure::kCount)> streams_failed;
  Counter rdma_send_completions, rdma_recv_completions;
  Histogram stream_open;     // accept -> OPEN sent (includes waiting for a session)
  Histogram target_connect;  // OPEN received -> target connected
  Histogram session_rtt;     // PING -> PONG
  // Sessions that resumed on a new transport, by the transport lost and the
  // one resumed on ([from][to]): rdma to tcp is auto's fallback.
  std::array<std::array<Counter, kTransportKinds>, kTransportKinds> session_resumes;
  // Transports sessions lost, by kind and why.
  std::array<std::array<Counter, static_cast<size_t>(TransportLoss::kCount)>, kTransportKinds> transport_losses;
  Counter stream_resume_failures;  // streams reset because their suspended session could not resume
  Counter resent_bytes;            // session frame bytes sent again after a resume
  // Tunnel handshakes that failed authentication (either side), by why.
  std::array<Counter, static_cast<size_t>(AuthFailure::kCount)> auth_failures;
  Counter& auth_failure(AuthFailure f) { return auth_failures[static_cast<size_t>(f)]; }
  Counter handshakes_refused;    // tunnel connections refused at accept: tunnel.limits.handshakes reached
  Counter sessions_idle_closed;  // on-demand sessions closed after tunnel.session_idle_ms without streams
  Counter sessions_evicted;      // idle sessions closed to make room under tunnel.max_sessions
  Counter sessions_refused;      // new sessions not dialled: max_sessions reached, none idle
  // tunnel.limits.sessions_per_address: a suspended session from the address
  // closed to make room for a new one, or the new one refused.
  Counter address_sessions_closed;
  // Sessions ended because the peer's proof no longer held (a reload removed
  // its key or CA, or its certificate ended).
  Counter sessions_revoked;
  Counter address_sessions_refused;
  Counter streams_handed_over;  // accepted here, carried by another worker's session (sessions_per_peer)
  // tunnel.rdma.max_pinned reached (docs/configuration.md, "Fleet").
  Counter rdma_budget_evicted;    // an idle RDMA session closed to make room
  Counter rdma_budget_tcp;        // a new session went to TCP instead (auto)
  Counter rdma_budget_refused;    // a new session not dialled (transport: rdma)
  Counter rdma_budget_rejected;   // a peer's RDMA connect rejected (accepting side)
  Counter access_log_lines;       // access log lines written
  Counter access_log_suppressed;  // left out by access_log.lines_per_second

  void failed(StreamFailure f) { streams_failed[static_cast<size_t>(f)].add(); }
  ListenerMetrics& listener(std::string_view name);
  PeerMetrics& peer(std::string_view name);

  // For the admin thread: visits entries in name order, under the lock that
  // creation takes (never held on the data path).
  void for_each_listener(const std::function<void(const std::string&, const ListenerMetrics&)>& fn) const;
  void for_each_peer(const std::function<void(const std::string&, const PeerMetrics&)>& fn) const;

 private:
  std::atomic<const uint8_t*> slab_base_{nullptr};
  std::atomic<size_t> slab_bytes_{0};
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<ListenerMetrics>, std::less<>> listeners_;
  std::map<std::string, std::unique_ptr<PeerMetrics>, std::less<>> peers_;
};

// Process-wide counters kept by the main thread.
// Which peers GET /metrics gives series of their own (metrics.peer_series),
// remembered for the process's life: a peer never moves between its own
// series and peer="(other)" but to (other) when the limit is lowered, so no
// counter of (other) ever goes down (which Prometheus would take for a
// reset). Any thread: the admin thread renders.
struct PeerSeriesMemory {
  std::mutex mu;
  std::set<std::string> own;     // have series of their own
  std::set<std::string> folded;  // were summed in (other): stay there
};

struct ProcessMetrics {
  Counter config_reloads;                // reloads applied
  Counter config_reload_failures;        // reloads refused (invalid file, bind error...)
  mutable PeerSeriesMemory peer_series;  // what GET /metrics showed per peer so far
};

}  // namespace rdmagw::metrics
