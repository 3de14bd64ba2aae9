// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/peer_links.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "common/address.h"
#include "common/log.h"

namespace rdmagw {

namespace {
// How long a Service endpoint whose tunnel port refused a dial is reached
// directly before the tunnel is tried again (one more refused dial a minute
// at most, for a label that keeps lying).
constexpr auto kRefusedTunnelMemory = std::chrono::seconds(60);
// A discovered peer without a session is remembered this long after its
// last use (its counters stay), so that GET /peers says for that long why
// its session closed.
constexpr auto kRememberDormant = std::chrono::minutes(5);
constexpr uint64_t kClaimSyncTicks = 10;  // ticks are 50 ms

// A discovered peer's name back to an address that peer_cidrs can match
// (they ignore the port).
std::optional<Endpoint> endpoint_of_address(const std::string& address) {
  std::string error;
  return make_tcp_endpoint(address, 1, &error);
}
}  // namespace

PeerLinks::PeerLinks(Wiring wiring, std::shared_ptr<const Config> config)
    : wiring_(wiring), config_(std::move(config)) {
  for (const PeerConfig& peer : config_->peers) links_.push_back(make_link(peer));
}

PeerLinks::~PeerLinks() { release_claims(); }

std::unique_ptr<tunnel::PeerLink> PeerLinks::make_link(const PeerConfig& peer) {
  return std::make_unique<tunnel::PeerLink>(wiring_.loop, wiring_.pool, peer, wiring_.settings, config_->tunnel,
                                            wiring_.connectors, static_cast<tunnel::SessionBudget*>(this));
}

void PeerLinks::start() {
  for (auto& link : links_) link->start();
}

tunnel::PeerLink* PeerLinks::find(const std::string& name) const {
  for (const auto& link : links_)
    if (link->name() == name) return link.get();
  auto it = discovered_.find(name);
  return it == discovered_.end() ? nullptr : it->second.get();
}

tunnel::PeerLink* PeerLinks::discover(const sockaddr* destination, std::string* why) {
  const PeerCidr* cidr = config_->find_peer_cidr(destination);
  if (!cidr) {
    *why = "destination is outside tunnel.peer_cidrs";
    return nullptr;
  }
  std::string ip = sockaddr_ip_text(destination);
  auto it = discovered_.find(ip);
  if (it != discovered_.end()) return it->second.get();
  if (shut_down_) {
    *why = "draining: no new peers";
    return nullptr;
  }
  PeerConfig peer;
  peer.name = ip;
  peer.address = ip;
  peer.tcp_port = cidr->tcp_port;
  peer.rdma_port = cidr->rdma_port;
  peer.discovered = true;
  auto ep = make_tcp_endpoint(ip, cidr->tcp_port, why);
  if (!ep) return nullptr;
  peer.tcp_endpoint = *ep;
  log::info("peer_discovered")
      .kv("peer", ip)
      .kv("tcp_port", peer.tcp_port)
      .kv("rdma_port", peer.rdma_port)
      .kv("cidr", cidr->cidr.to_string());
  auto link = make_link(peer);
  link->start();  // on demand: dials when the stream is submitted
  return discovered_.emplace(ip, std::move(link)).first->second.get();
}

tunnel::PeerLink* PeerLinks::find_or_discover(const std::string& name) {
  if (tunnel::PeerLink* link = find(name)) return link;
  auto ep = endpoint_of_address(name);
  std::string error;
  return ep ? discover(reinterpret_cast<const sockaddr*>(&ep->addr), &error) : nullptr;
}

void PeerLinks::apply(std::shared_ptr<const Config> config) {
  config_ = std::move(config);
  std::vector<std::unique_ptr<tunnel::PeerLink>> links;
  for (const PeerConfig& peer : config_->peers) {
    std::unique_ptr<tunnel::PeerLink> link;
    for (auto& old : links_) {
      if (old && old->name() == peer.name && old->config().address == peer.address &&
          old->config().tcp_port == peer.tcp_port && old->config().rdma_port == peer.rdma_port &&
          old->config().always_connected == peer.always_connected)
        link = std::move(old);
    }
    if (!link) {
      link = make_link(peer);
      if (shut_down_)
        link->begin_shutdown();
      else
        link->start();
    }
    links.push_back(std::move(link));
  }
  for (auto& old : links_) {
    if (!old) continue;
    // Streams still waiting for a session go to the link that replaces
    // this one (same name, new address); without one, the peer is gone.
    tunnel::PeerLink* successor = nullptr;
    for (auto& link : links)
      if (link->name() == old->name()) successor = link.get();
    for (tunnel::PendingStream* stream : old->take_waiting()) {
      if (successor)
        successor->submit(stream);
      else
        stream->abort(tunnel::ResetCode::kPeerGone, "peer " + old->name() + " was removed by a reload");
    }
    old->retire();
    retired_.push_back(std::move(old));
  }
  links_ = std::move(links);
  retire_undiscoverable();
  for_each([&](tunnel::PeerLink& link) {
    link.set_session_idle_ms(config_->tunnel.session_idle_ms);
    link.set_rdma_share(config_->tunnel.rdma_share);
  });
}

void PeerLinks::retire_undiscoverable() {
  for (auto it = discovered_.begin(); it != discovered_.end();) {
    auto ep = endpoint_of_address(it->first);
    const PeerCidr* cidr = ep ? config_->find_peer_cidr(reinterpret_cast<const sockaddr*>(&ep->addr)) : nullptr;
    tunnel::PeerLink& link = *it->second;
    if (cidr && cidr->tcp_port == link.config().tcp_port && cidr->rdma_port == link.config().rdma_port) {
      ++it;
      continue;
    }
    // Outside peer_cidrs now, or at other ports: its streams finish on it.
    for (tunnel::PendingStream* stream : link.take_waiting())
      stream->abort(tunnel::ResetCode::kPeerGone, "peer " + link.name() + " left tunnel.peer_cidrs in a reload");
    link.retire();
    retired_.push_back(std::move(it->second));
    it = discovered_.erase(it);
  }
}

void PeerLinks::begin_shutdown() {
  shut_down_ = true;
  for_each([](tunnel::PeerLink& link) { link.begin_shutdown(); });
}

void PeerLinks::end_shutdown() {
  shut_down_ = false;
  // Retired links stay retired: they only finish what they carry.
  for (auto& link : links_) link->end_shutdown();
  for (auto& [address, link] : discovered_) link->end_shutdown();
}

bool PeerLinks::refused_recently(const tunnel::PeerLink& link) const {
  std::optional<Clock::time_point> refused = link.refused_at();
  return refused && !link.up() && wiring_.loop.now() - *refused < kRefusedTunnelMemory;
}

tunnel::PeerLink* PeerLinks::longest_idle_link(const tunnel::PeerLink& except, bool rdma_only) {
  // On-demand links only (idle_since() says): one that is always connected
  // would be dialled again at once.
  tunnel::PeerLink* oldest = nullptr;
  Clock::time_point oldest_since{};
  for_each([&](tunnel::PeerLink& l) {
    if (&l == &except || (rdma_only && l.active_transport() != tunnel::TransportKind::kRdma)) return;
    auto since = l.idle_since();
    if (since && (!oldest || *since < oldest_since)) {
      oldest = &l;
      oldest_since = *since;
    }
  });
  return oldest;
}

bool PeerLinks::make_room_for_session(const tunnel::PeerLink& link) {
  size_t sessions = 0;
  for_each([&](tunnel::PeerLink& l) { sessions += l.session_count(); });
  uint32_t max = config_->tunnel.max_sessions;
  if (sessions < max) return true;
  // The session idle the longest goes.
  tunnel::PeerLink* oldest = longest_idle_link(link, false);
  std::string limit = "tunnel.max_sessions (" + std::to_string(max) + ") reached";
  if (oldest && oldest->close_if_idle("closed to make room for a session to " + link.name() + ": " + limit)) {
    wiring_.metrics.sessions_evicted.add();
    log::info("session_evicted").kv("peer", oldest->name()).kv("for_peer", link.name()).kv("reason", limit);
    return true;
  }
  wiring_.metrics.sessions_refused.add();
  uint64_t suppressed = 0;
  if (session_limit_log_.allow(wiring_.loop.now(), &suppressed)) {
    log::Line line = log::warn("session_refused");
    line.kv("peer", link.name()).kv("reason", limit + " and every session carries streams");
    if (suppressed) line.kv("suppressed", suppressed);
  }
  return false;
}

bool PeerLinks::has_rdma_room() const { return !wiring_.rdma || !wiring_.rdma->at_transport_limit(); }

tunnel::SessionBudget::RdmaRoom PeerLinks::make_room_for_rdma(const tunnel::PeerLink& link) {
  if (has_rdma_room()) return RdmaRoom::kYes;
  transport::RdmaContext& rdma = *wiring_.rdma;
  Clock::time_point now = wiring_.loop.now();
  // The RDMA session idle the longest goes.
  tunnel::PeerLink* oldest = longest_idle_link(link, true);
  const TunnelConfig& t = config_->tunnel;
  std::string limit = "tunnel.rdma.max_pinned (" +
                      std::to_string(t.rdma.pinned_budget(wiring_.pool.buffer_size()) >> 20) + " MiB, " +
                      std::to_string(rdma.transport_limit()) + " RDMA sessions per worker) reached";
  RdmaRoom room = RdmaRoom::kNo;
  // A session closed to make room counts until its QP is gone (a flush and
  // a disconnect later): meanwhile, close no other one for the same room.
  bool closing_one = rdma.transports() >= rdma_count_at_eviction_ && now - rdma_eviction_at_ < std::chrono::seconds(2);
  if (closing_one) {
    room = RdmaRoom::kSoon;
  } else if (oldest &&
             oldest->close_if_idle("closed to make room for an RDMA session to " + link.name() + ": " + limit)) {
    wiring_.metrics.rdma_budget_evicted.add();
    log::info("session_evicted").kv("peer", oldest->name()).kv("for_peer", link.name()).kv("reason", limit);
    room = RdmaRoom::kSoon;
    rdma_count_at_eviction_ = rdma.transports();
    rdma_eviction_at_ = now;
  }
  bool to_tcp = t.transport == TransportMode::kAuto;
  if (to_tcp)
    wiring_.metrics.rdma_budget_tcp.add();
  else if (room == RdmaRoom::kNo)
    wiring_.metrics.rdma_budget_refused.add();
  uint64_t suppressed = 0;
  if ((to_tcp || room == RdmaRoom::kNo) && session_limit_log_.allow(now, &suppressed)) {
    log::Line line = to_tcp ? log::info("transport_fallback") : log::warn("session_refused");
    if (to_tcp)
      line.kv("peer", link.name()).kv("from", "rdma").kv("to", "tcp").kv("reason", limit);
    else
      line.kv("peer", link.name()).kv("reason", limit + " and every RDMA session carries streams");
    if (suppressed) line.kv("suppressed", suppressed);
  }
  return room;
}

bool PeerLinks::may_hold_session(const tunnel::PeerLink& link) {
  uint32_t cap = config_->tunnel.sessions_per_peer;
  if (cap == 0 || claims_.contains(link.name())) return true;
  if (!wiring_.directory.claim_peer(link.name(), wiring_.worker, cap)) return false;
  claims_.insert(link.name());
  return true;
}

void PeerLinks::claim_for_handed_stream(const tunnel::PeerLink& link) {
  if (config_->tunnel.sessions_per_peer != 0 && wiring_.directory.claim_peer(link.name(), wiring_.worker, UINT32_MAX))
    claims_.insert(link.name());
}

void PeerLinks::release_claims() {
  for (const std::string& peer : claims_) wiring_.directory.release_peer(peer, wiring_.worker);
  claims_.clear();
}

void PeerLinks::sync_claims() {
  bool capped = config_->tunnel.sessions_per_peer != 0;
  // Which peers these links (retired ones too) carry something to.
  std::unordered_set<std::string> busy;
  if (capped)
    for_each([&](const tunnel::PeerLink& l) {
      if (!l.finished()) busy.insert(l.name());
    });
  // A link carrying something holds a claim, even one that never asked:
  // sessions adopted in a takeover, or open before a reload set the cap.
  for (const std::string& peer : busy)
    if (!claims_.contains(peer) && wiring_.directory.claim_peer(peer, wiring_.worker, UINT32_MAX)) claims_.insert(peer);
  for (auto it = claims_.begin(); it != claims_.end();) {
    if (busy.contains(*it)) {
      ++it;
      continue;
    }
    wiring_.directory.release_peer(*it, wiring_.worker);
    it = claims_.erase(it);
  }
}

void PeerLinks::tick(Clock::time_point now) {
  for_each([&](tunnel::PeerLink& link) { link.tick(now); });
  ++ticks_;
  if ((!claims_.empty() || config_->tunnel.sessions_per_peer != 0) && ticks_ % kClaimSyncTicks == 0) sync_claims();
  std::erase_if(retired_, [](const auto& link) { return link->finished(); });
  // Sooner when many are remembered: a link without a session is small,
  // but a scan of a large peer_cidrs must not pile them up.
  auto forget_after =
      std::max<Clock::duration>(kRememberDormant, std::chrono::milliseconds(config_->tunnel.session_idle_ms));
  bool crowded = discovered_.size() > std::max<size_t>(256, 4 * size_t{config_->tunnel.max_sessions});
  std::erase_if(discovered_, [&](const auto& entry) {
    const tunnel::PeerLink& link = *entry.second;
    return link.dormant() && (crowded || now - link.last_used() >= forget_after);
  });
}

void PeerLinks::close_all(std::string_view reason, tunnel::CloseMode mode) {
  for_each([&](tunnel::PeerLink& link) { link.close_all(reason, mode); });
}

void PeerLinks::describe_discovered(std::vector<DiscoveredState>* out) const {
  for (const auto& [address, link] : discovered_) out->push_back({address, link->state_name(), link->last_error()});
}

}  // namespace rdmagw
