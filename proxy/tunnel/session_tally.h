// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a session counts, kept twice: its own totals (GET /peers, a
// takeover's image, the tests) and, once it knows its peer, the same into
// that peer's metrics (the sessions gauge by transport included), which
// outlive the session.
#include <cstdint>

#include "common/metrics.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw::tunnel {

// A session's own totals.
struct SessionCounters {
  uint64_t frames_in = 0, frames_out = 0;
  uint64_t bytes_in = 0, bytes_out = 0;  // stream payload bytes
  uint64_t bytes_queued = 0;  // of bytes_in: not taken by the socket on arrival, copied into a stream's queue
  uint64_t streams_opened = 0, streams_refused = 0;
  uint64_t credit_stalls = 0;
  uint64_t resumes = 0;       // transports it resumed on
  uint64_t resent_bytes = 0;  // session frame bytes sent again after a resume
};

class SessionTally {
 public:
  SessionTally() = default;
  SessionTally(const SessionTally&) = delete;
  SessionTally& operator=(const SessionTally&) = delete;
  // Lowers the gauge it raised, if any.
  ~SessionTally() { count_closed(); }

  SessionCounters& totals() { return totals_; }
  const SessionCounters& totals() const { return totals_; }
  // The peer's metrics (the worker's entry for its node), from when the
  // session knows its peer; null until then and without metrics.
  metrics::PeerMetrics* peer() const { return peer_; }
  void set_peer(metrics::PeerMetrics* peer) { peer_ = peer; }

  void bytes_out(uint64_t n) {
    totals_.bytes_out += n;
    if (peer_) peer_->bytes_sent.add(n);
  }
  void bytes_in(uint64_t n) {
    totals_.bytes_in += n;
    if (peer_) peer_->bytes_received.add(n);
  }
  void bytes_queued(uint64_t n) {
    totals_.bytes_queued += n;
    if (peer_) peer_->bytes_queued.add(n);
  }
  void credit_stall() {
    ++totals_.credit_stalls;
    if (peer_) peer_->credit_stalls.add();
  }
  void stream_opened() {
    ++totals_.streams_opened;
    if (peer_) peer_->streams_opened.add();
  }
  // The session is open on a transport of `kind`: its peer's sessions
  // gauge for that kind counts it, once, until count_closed().
  void count_open(TransportKind kind) {
    if (!peer_ || gauge_) return;
    gauge_ = kind == TransportKind::kRdma ? &peer_->sessions_rdma : &peer_->sessions_tcp;
    gauge_->add();
  }
  void count_closed() {
    if (!gauge_) return;
    gauge_->sub();
    gauge_ = nullptr;
  }

 private:
  SessionCounters totals_;
  metrics::PeerMetrics* peer_ = nullptr;
  metrics::Gauge* gauge_ = nullptr;  // the sessions gauge this session raised
};

}  // namespace rdmagw::tunnel
