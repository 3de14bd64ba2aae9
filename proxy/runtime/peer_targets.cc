// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/peer_targets.h"

#include <algorithm>

#include "common/log.h"
#include "proxy/local/access_log.h"
#include "proxy/local/local_stream.h"
#include "proxy/local/stream_origin.h"
#include "proxy/tunnel/tunnel_info.h"

namespace rdmagw {

tunnel::Stream* PeerTargets::open(tunnel::Session& session, uint32_t id, std::string_view target,
                                  const tunnel::StreamOrigin* origin, tunnel::ResetCode* refuse) {
  std::string error;
  auto endpoint = parse_endpoint(target, &error);
  // Authorization by peer: by the address of the peer's end of the session.
  auto peer = parse_host_port(tunnel::without_transport(session.remote_address()), &error);
  // Mode cert: its certificate proved its node name too.
  std::string_view proven = w_.config->tunnel.auth.mode == AuthMode::kCert ? session.peer_node() : std::string_view();
  const TargetRule* admitted = nullptr;
  TargetRefusal refusal =
      !endpoint ? TargetRefusal::kNotListed
                : w_.config->target_refusal(*endpoint, peer ? reinterpret_cast<const sockaddr*>(&peer->addr) : nullptr,
                                            proven, facts_, &admitted);
  // Never rdmagw itself, even where targets would allow it.
  std::string own = endpoint && refusal == TargetRefusal::kNone ? own_port_problem(*endpoint) : std::string();
  if (!own.empty()) refusal = TargetRefusal::kNotListed;
  if (refusal != TargetRefusal::kNone) {
    uint64_t suppressed = 0;
    if (refusal_log_.allow(w_.loop.now(), &suppressed)) {
      log::Line line = log::warn("stream_refused");
      std::string who = proven.empty() ? "peers" : "node " + std::string(proven);
      std::string detail = !endpoint      ? error
                           : !own.empty() ? own
                           : refusal == TargetRefusal::kNotForThisPeer
                               ? "target is not open to " + who + " at " + tunnel::host_of(session.remote_address())
                           : w_.config->has_this_node_target()
                               ? "target is not in targets, nor an endpoint the services table puts on this node"
                               : "target is not in targets";
      line.kv("peer", session.peer_node())
          .kv("remote", session.remote_address())
          .kv("stream", id)
          .kv("connection", origin ? local::connection_of(*origin).text() : std::string())
          .kv("target", target)
          .kv("reason", "not-allowed")
          .kv("detail", detail);
      if (suppressed) line.kv("suppressed", suppressed);
    }
    w_.metrics.failed(metrics::StreamFailure::kNotAllowed);
    std::string connection, client, destination;
    if (origin) {
      connection = local::connection_of(*origin).text();
      client = local::origin_address_text(origin->client);
      destination = local::origin_address_text(origin->destination);
    }
    local::AccessRecord record;
    record.direction = "inbound";
    record.connection = connection;
    record.client = client;
    record.destination = destination;
    record.remote = session.remote_address();
    record.peer = session.peer_node();
    record.transport = tunnel::transport_kind_name(session.transport_kind());
    record.target = target;
    record.reason = "not-allowed";
    if (local::AccessLog* log = w_.host.access_log) log->write_refused(record);
    *refuse = tunnel::ResetCode::kNotAllowed;
    return nullptr;
  }
  bool proxy_header = admitted && admitted->proxy_protocol;
  return local::LocalStream::to_target(w_.host, session, id, *endpoint, origin, proxy_header, refuse);
}

bool PeerTargets::on_this_node(const Endpoint& target) {
  const ServiceTable* table = w_.services.table().get();
  services_table::AddressRecord address{};
  uint16_t port = 0;
  if (!table || target.kind != Endpoint::Kind::kTcp ||
      !service_address::from_sockaddr(reinterpret_cast<const sockaddr*>(&target.addr), &address, &port))
    return false;
  ServiceTable::EndpointRef ref = table->find_endpoint(address, port);
  // Its own sidecar carries an endpoint that has one; the node's rdmagw
  // only the others. Never one on this host's own addresses, whatever the
  // EndpointSlices say (rdmagw's own ports, the kubelet's): the clients of
  // a pod on the host's network reach it directly (service_tunnel_address).
  if (!ref.endpoint || ServiceTable::has_rdmagw(*ref.endpoint) || is_local_address_(target)) return false;
  const services_table::AddressRecord* node = table->node_tunnel(*ref.endpoint);
  return node && is_this_host(*node);
}

bool PeerTargets::is_this_host(const services_table::AddressRecord& address) const {
  Endpoint e;
  e.addr_len = service_address::to_sockaddr(address, 0, &e.addr);
  return is_local_address_(e);
}

std::string PeerTargets::own_port_problem(const Endpoint& target) {
  if (target.kind != Endpoint::Kind::kTcp) return {};
  uint16_t port = endpoint_port(target);
  if (std::find(own_ports_.begin(), own_ports_.end(), port) == own_ports_.end()) return {};
  if (!local_addresses_.contains(target)) return {};
  return target.to_string() + " is rdmagw's own admin or tunnel port on this host";
}

}  // namespace rdmagw
