// SPDX-License-Identifier: Apache-2.0
#pragma once
// What every application connection of a worker shares: its loop, its
// buffers, limits, counters, and the list of live connections (streams and
// passthrough pipes), so that the end of a drain can reset whatever is left
// and the admin endpoint can list streams. One per worker; never shared
// across threads.
#include <cstdint>
#include <string_view>

#include "common/buffer_pool.h"
#include "common/metrics.h"
#include "proxy/io/event_loop.h"
#include "proxy/io/provided_buffers.h"
#include "proxy/local/connection_image.h"
#include "proxy/local/endpoint_lease.h"
#include "proxy/local/listener_load.h"
#include "proxy/local/stream_info.h"

namespace rdmagw::local {

class AccessLog;
class LocalConnection;
struct LegRedirector;

struct StreamHost {
  EventLoop& loop;
  BufferPool& pool;
  metrics::WorkerMetrics& metrics;
  unsigned worker;              // index, for the admin endpoint
  uint32_t payload_size;        // bytes read from a socket per DATA frame
  uint32_t connect_timeout_ms;  // for connections to targets
  // Where socket receives take their buffers when data arrives; null (or
  // inactive) on kernels without buffer rings: streams then wait for
  // readiness and read into a pool buffer (local_stream.cc).
  ProvidedBuffers* receive_ring = nullptr;
  // One line per connection when it ends (null: none; tests of the layer).
  AccessLog* access_log = nullptr;
  // The local legs past TCP (local_legs.redirect), when they are on.
  LegRedirector* redirector = nullptr;
  uint64_t live = 0;  // connections not yet freed (a drain waits for 0)
  LocalConnection* first = nullptr;

  // Resets every connection still open (the end of a drain, a forced stop).
  void reset_all(std::string_view reason);
  // About once a second: ends the connections idle past their listener's
  // idle_timeout_ms.
  void check_idle(std::chrono::steady_clock::time_point now);
};

// What a connection owes the listener it came from: its place in the
// listener's count (max_connections), and how long it may pass no byte
// either way (idle_timeout_ms, 0: forever).
struct ListenerTerms {
  ListenerSlot slot;
  uint32_t idle_timeout_ms = 0;
};

// An application connection: its lifetime follows the IoObject rule, and it
// is on its host's list from construction to deletion.
class LocalConnection : public IoObject {
 public:
  // Ends the connection now with a reset towards the application (and the
  // target, and the peer); no-op once it is ending.
  virtual void reset_now(std::string_view reason) = 0;
  // Fills `out` and returns true for what GET /streams lists (tunnel streams).
  virtual bool describe(StreamInfo*) const { return false; }
  // Ending: only waiting for its last completions.
  virtual bool ending() const = 0;

  // --- a takeover moves connections to a new process ------------------------
  // Posts no more I/O and cancels what is posted; its state stays. Idempotent.
  virtual void freeze() = 0;
  // Frozen, with no operation in flight: its state no longer changes.
  bool quiet() const { return ops_in_flight() == 0; }
  // Adds itself to `out`; false if it cannot move (it is ending).
  virtual bool export_image(HandoverImages* out, const SessionIndex& sessions) const = 0;
  // It moved: ends here without touching its sockets, which live on there.
  virtual void forget() = 0;
  // The takeover failed: carries on.
  virtual void thaw() = 0;
  LocalConnection* next_in_host() const { return next_; }
  // A Service's endpoint chosen for it: counted there while it lives.
  void count_towards(EndpointLease lease) { lease_ = std::move(lease); }
  // Hands the count to what carries the connection on (a diverted stream's pipe).
  EndpointLease take_lease() { return std::move(lease_); }
  // Its listener's terms, from accept on; handed on as the lease is.
  void follow(ListenerTerms terms);
  ListenerTerms take_terms();
  // Ends it (a reset both ways) if no byte moved either way since the
  // last calls for its listener's idle_timeout_ms.
  void check_idle(std::chrono::steady_clock::time_point now);

 protected:
  explicit LocalConnection(StreamHost& host);
  ~LocalConnection() override;
  // Bytes it moved so far, both ways (what idleness is judged by), and how
  // it ends when idle too long.
  virtual uint64_t bytes_moved() const = 0;
  virtual void end_idle() = 0;
  // Connected end to end and not frozen by a takeover: only then can it be
  // idle (waiting for a session or a connect has timeouts of its own).
  virtual bool carrying() const = 0;

  StreamHost& host_;

 private:
  LocalConnection* prev_ = nullptr;
  LocalConnection* next_ = nullptr;
  EndpointLease lease_;
  ListenerSlot slot_;
  uint32_t idle_timeout_ms_ = 0;
  uint64_t idle_bytes_ = 0;  // bytes_moved() when last seen to change
  std::chrono::steady_clock::time_point idle_since_{};
};

}  // namespace rdmagw::local
