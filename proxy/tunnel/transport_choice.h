// SPDX-License-Identifier: Apache-2.0
#pragma once
// Which transport a peer link dials, and why: the one place that decides
// between the tunnel's transports (docs/architecture.md, "Adding a
// transport"). PeerLink owns one and asks it before each dial; the dial
// itself, its retries and the sessions stay PeerLink's.
//
// What it weighs: tunnel.transport (tcp, rdma, or auto), whether this
// process has an RDMA connector at all, tunnel.rdma_share (which peers are
// in the share: a hash of this node and the peer's address, stable across
// workers and restarts), and the link's recent RDMA failures (in auto,
// three in a row send the peer to TCP until an RDMA transport has carried
// for twice keepalive_timeout_ms). It also says when TCP is dialled beside
// a slow RDMA connect (rdma_head_start_ms), when a session on TCP tries
// RDMA again (rdma_probe_interval_ms), and what /peers shows as the reason.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"
#include "proxy/io/event_loop.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw::tunnel {

class TransportChoice {
 public:
  // `tunnel`: the link's own copy of the keys, which a reload's
  // rdma_share changes in place; it outlives this. `has_rdma`, `has_tcp`:
  // the connectors this process has.
  TransportChoice(const TunnelConfig& tunnel, bool has_rdma, bool has_tcp, std::string node, std::string peer_address)
      : tunnel_(tunnel),
        has_rdma_(has_rdma),
        has_tcp_(has_tcp),
        node_(std::move(node)),
        peer_address_(std::move(peer_address)) {}

  // The kind the next dial of a session (new, or resuming) uses.
  TransportKind preferred() const;
  // auto: RDMA that fails, or has no room, is replaced by TCP; rdma never
  // falls back (it retries RDMA), tcp never dials RDMA.
  bool falls_back_to_tcp() const { return tunnel_.transport == TransportMode::kAuto; }
  // tunnel.rdma_share: whether this peer is among the share whose sessions
  // use RDMA (auto).
  bool in_rdma_share() const;
  // How long an RDMA connect may take before TCP is dialled beside it; none
  // outside auto, without TCP, or with rdma_head_start_ms 0. Never more
  // than half of connect_timeout_ms, so that the streams waiting for the
  // session (which give up after connect_timeout_ms) can still go by TCP.
  std::optional<uint32_t> tcp_head_start_ms() const;
  // auto with an RDMA connector: a session this link holds on TCP tries
  // RDMA every rdma_probe_interval_ms (if it may move and the peer is in
  // the share: the caller asks in_rdma_share() last, it costs more).
  bool probes_rdma() const {
    return tunnel_.transport == TransportMode::kAuto && has_rdma_ && tunnel_.rdma_probe_interval_ms > 0;
  }

  // --- what happened to the link's transports ------------------------------
  // An RDMA dial failed, lost its race with TCP, or its transport failed
  // before it proved itself.
  void rdma_failed() { ++rdma_failures_; }
  uint32_t rdma_failures() const { return rdma_failures_; }
  // A transport of `kind` now carries the link's session.
  void carrying(TransportKind kind, Clock::time_point now);
  // The active session lost its transport and waits for another. If that
  // was RDMA and it lived too little to prove itself (it connected, then
  // could not carry: a link that reorders or drops most packets), it
  // counts as a failed RDMA attempt: how long it lived. Else nullopt.
  std::optional<Clock::duration> transport_lost(Clock::time_point now);
  // The active session ended.
  void session_ended() { rdma_since_.reset(); }
  // Every tick: an RDMA transport that has carried long enough clears the
  // failures.
  void tick(Clock::time_point now);

  // --- what /peers and the log say ------------------------------------------
  // Why the link's session uses its transport (set by the link when it
  // falls back, or moves): empty until something happened.
  void set_reason(std::string reason) { reason_ = std::move(reason); }
  // A session just opened on `kind`: the reason it keeps.
  const std::string& opened_on(TransportKind kind);
  // GET /peers' transport_reason.
  std::string reason() const;

 private:
  std::string rdma_share_reason() const;
  // Why the settings alone put this peer on TCP (tcp mode, no RDMA device,
  // outside rdma_share); nullopt when they allow RDMA.
  std::optional<std::string> tcp_by_setting() const;
  // Twice the keepalive timeout: a transport that carries nothing ends
  // within one (the keepalive fails), so one that outlives two carries.
  Clock::duration rdma_proving_time() const;

  const TunnelConfig& tunnel_;
  bool has_rdma_, has_tcp_;
  std::string node_, peer_address_;
  uint32_t rdma_failures_ = 0;  // consecutive; in auto, 3 of them switch the peer to TCP
  // When the active session's RDMA transport came up (see transport_lost).
  std::optional<Clock::time_point> rdma_since_;
  std::string reason_;
};

}  // namespace rdmagw::tunnel
