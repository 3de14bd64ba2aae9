// SPDX-License-Identifier: Apache-2.0
#pragma once
// Which targets a peer may open streams to on this host, and what this
// host is to decide it: its own addresses (targets written tcp:self:PORT),
// rdmagw's own admin and tunnel ports there (never a target, whatever
// `targets` or the services file say), and the Service endpoints the
// services table puts on this node (`services:this-node`). A stream a peer
// may open goes to its target as a LocalStream; one it may not is refused,
// counted, logged and written to the access log.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/address.h"
#include "common/local_addresses.h"
#include "common/log_limiter.h"
#include "common/metrics.h"
#include "config/config.h"
#include "proxy/io/event_loop.h"
#include "proxy/local/stream_host.h"
#include "proxy/runtime/service_router.h"
#include "proxy/tunnel/session.h"

namespace rdmagw {

class PeerTargets {
 public:
  struct Wiring {
    EventLoop& loop;
    local::StreamHost& host;
    metrics::WorkerMetrics& metrics;
    const ServiceRouter& services;
    // The worker's configuration, as reloads replace it.
    const std::shared_ptr<const Config>& config;
  };
  // `own_ports`: the admin and tunnel ports (a reload cannot change them).
  PeerTargets(Wiring wiring, std::vector<uint16_t> own_ports) : w_(wiring), own_ports_(std::move(own_ports)) {}
  PeerTargets(const PeerTargets&) = delete;
  PeerTargets& operator=(const PeerTargets&) = delete;

  // A stream a peer opens on a session it dialed to us (InboundSessions'
  // StreamOpener): to its target if `targets` allow it to this peer; else
  // null with *refuse.
  tunnel::Stream* open(tunnel::Session& session, uint32_t id, std::string_view target,
                       const tunnel::StreamOrigin* origin, tunnel::ResetCode* refuse);
  // Empty, or why `target` is refused: rdmagw's own admin or tunnel port on
  // this host.
  std::string own_port_problem(const Endpoint& target);
  bool is_this_host(const services_table::AddressRecord& address) const;
  // What `targets` entries without a fixed endpoint ask (Config::target_listed).
  const TargetFacts& facts() const { return facts_; }

 private:
  // Whether the services table puts `target` on this node (services:this-node).
  bool on_this_node(const Endpoint& target);

  Wiring w_;
  std::vector<uint16_t> own_ports_;
  LocalAddresses local_addresses_;
  LocalAddressTest is_local_address_ = [this](const Endpoint& e) { return local_addresses_.contains(e); };
  TargetFacts facts_{is_local_address_, [this](const Endpoint& e) { return on_this_node(e); }};
  // Refused OPENs are the peer's to multiply: at most 10 lines a second
  // (bursts of 20) per worker; the metric counts them all.
  log::LogLimiter refusal_log_{10, 20};
};

}  // namespace rdmagw
