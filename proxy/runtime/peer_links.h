// SPDX-License-Identifier: Apache-2.0
#pragma once
// The links one worker dials its peers with: one per configured peer, the
// ones a reload retired (finishing the streams they carry), and the ones
// found on demand (`peer: destination` routes, Services), by the peer
// host's address. Also the budget every new session of theirs passes
// (tunnel::SessionBudget): tunnel.max_sessions and tunnel.rdma.max_pinned,
// closing the session idle the longest to make room, and
// tunnel.sessions_per_peer through this worker's claims on peers in the
// process's SessionDirectory.
//
// Which link a connection takes is ConnectionRouter's to decide; handing a
// stream to the worker that holds its peer is the worker's.
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/buffer_pool.h"
#include "common/log_limiter.h"
#include "common/metrics.h"
#include "config/config.h"
#include "proxy/io/event_loop.h"
#include "proxy/runtime/session_directory.h"
#include "proxy/transport/rdma/rdma_context.h"
#include "proxy/tunnel/peer_link.h"

namespace rdmagw {

class PeerLinks final : private tunnel::SessionBudget {
 public:
  // What the links are made with; all of it outlives this.
  struct Wiring {
    EventLoop& loop;
    BufferPool& pool;
    const tunnel::SessionSettings& settings;
    tunnel::Connectors connectors;
    transport::RdmaContext* rdma = nullptr;  // null without RDMA: no pinned budget
    SessionDirectory& directory;
    unsigned worker = 0;  // this worker's index in `directory`
    metrics::WorkerMetrics& metrics;
  };
  // Makes a link per peer of `config` (none started: see start()).
  PeerLinks(Wiring wiring, std::shared_ptr<const Config> config);
  // Claims still held are released; links still here are destroyed (their
  // waiting streams reset).
  ~PeerLinks();
  PeerLinks(const PeerLinks&) = delete;
  PeerLinks& operator=(const PeerLinks&) = delete;

  // The configured links start (those with `connect: always` dial now).
  void start();

  // A configured or discovered link by name (a discovered one's name is its
  // host's address); null if none.
  tunnel::PeerLink* find(const std::string& name) const;
  // The link to the sidecar on `destination`'s host, made on first use;
  // null (and *why) if that address lies outside tunnel.peer_cidrs, or
  // links are shut down (a drain) and none is there yet.
  tunnel::PeerLink* discover(const sockaddr* destination, std::string* why);
  // find(), else discover() of the address `name` spells (a takeover's
  // sessions and streams, a stream another worker handed over).
  tunnel::PeerLink* find_or_discover(const std::string& name);

  // Every link: configured, retired, discovered.
  template <class F>
  void for_each(F&& f) const {
    for (const auto& link : links_) f(*link);
    for (const auto& link : retired_) f(*link);
    for (const auto& [address, link] : discovered_) f(*link);
  }

  // A reload. A peer whose address, ports or `connect` changed is a new
  // link; the old one, and those of removed peers, finish what they carry
  // (waiting streams move to the new link of the same name, or are reset).
  // Discovered links outside the new peer_cidrs (or at other ports) finish
  // the same way.
  void apply(std::shared_ptr<const Config> config);

  // A drain: every link dials nothing more and no peer is discovered; new
  // links of a reload meanwhile start shut down. end_shutdown() undoes it.
  void begin_shutdown();
  void end_shutdown();

  // The link's last TCP dial was refused within the last minute and it has
  // no session: a Service endpoint behind it is reached directly meanwhile.
  bool refused_recently(const tunnel::PeerLink& link) const;
  // tunnel.sessions_per_peer: whether this worker holds, or may claim, a
  // session to the link's peer (claiming it if so).
  bool may_hold_session(const tunnel::PeerLink& link) override;
  // A stream another worker handed here for `link`'s peer: claimed whatever
  // the cap says now (the worker that sent it relied on the claim).
  void claim_for_handed_stream(const tunnel::PeerLink& link);
  // Before the worker goes: no other worker may hand it a stream.
  void release_claims();

  // Every 50 ms tick: links tick; claims follow what links carry (every
  // tenth); retired links that finished go; discovered links unused for 5
  // minutes (or sooner, when very many are remembered) are forgotten.
  void tick(Clock::time_point now);
  void close_all(std::string_view reason, tunnel::CloseMode mode);

  // A discovered link, as GET /peers lists it.
  struct DiscoveredState {
    std::string address;
    std::string_view state;  // PeerLink::state_name
    std::string error;       // its last dial failure
  };
  void describe_discovered(std::vector<DiscoveredState>* out) const;

 private:
  std::unique_ptr<tunnel::PeerLink> make_link(const PeerConfig& peer);
  // SessionBudget: tunnel.max_sessions.
  bool make_room_for_session(const tunnel::PeerLink& link) override;
  // tunnel.rdma.max_pinned.
  RdmaRoom make_room_for_rdma(const tunnel::PeerLink& link) override;
  bool has_rdma_room() const override;
  // Another link's session that carries nothing, idle the longest (of RDMA
  // sessions only, if asked); null if none.
  tunnel::PeerLink* longest_idle_link(const tunnel::PeerLink& except, bool rdma_only);
  void retire_undiscoverable();
  // Keeps the claims in step with the links: a link that carries something
  // holds one, one that carries nothing lets it go.
  void sync_claims();

  Wiring wiring_;
  std::shared_ptr<const Config> config_;
  std::vector<std::unique_ptr<tunnel::PeerLink>> links_;                           // one per configured peer
  std::vector<std::unique_ptr<tunnel::PeerLink>> retired_;                         // removed by a reload, finishing
  std::unordered_map<std::string, std::unique_ptr<tunnel::PeerLink>> discovered_;  // by the host's address
  std::unordered_set<std::string> claims_;  // peers this worker claimed (SessionDirectory::claim_peer)
  bool shut_down_ = false;
  uint64_t ticks_ = 0;
  // The last RDMA session closed for tunnel.rdma.max_pinned: when, and how
  // many RDMA transports there were then (make_room_for_rdma).
  size_t rdma_count_at_eviction_ = SIZE_MAX;
  Clock::time_point rdma_eviction_at_{};
  // Refused sessions: at most a line a second.
  log::LogLimiter session_limit_log_{1, 5};
};

}  // namespace rdmagw
