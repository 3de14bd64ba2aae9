// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/connection_router.h"

#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "common/log.h"
#include "common/socket_options.h"
#include "proxy/local/access_log.h"
#include "proxy/local/direct_pipe.h"
#include "proxy/local/local_stream.h"

namespace rdmagw {

ConnectionRouter::OriginalDestination ConnectionRouter::from_kernel(local::LocalRedirect* redirect) {
  return [redirect](int fd, const ListenerConfig& listener, sockaddr_storage* out, socklen_t* len, int* error) {
    // Captured at connect() with the local legs redirected: the programs
    // kept it by the client's end.
    if (redirect) {
      sockaddr_storage client{};
      socklen_t client_len = sizeof(client);
      if (getpeername(fd, reinterpret_cast<sockaddr*>(&client), &client_len) == 0)
        if (std::optional<sockaddr_storage> meant = redirect->take_destination(client)) {
          *out = *meant;
          *len = sizeof(sockaddr_in);
          return true;
        }
    }
    // Where the application meant to go, before iptables REDIRECT sent it
    // here. io_uring's getsockopt serves SOL_SOCKET only, so this one is
    // synchronous.
    *len = sizeof(*out);
    int rc = listener.listen.addr.ss_family == AF_INET6 ? getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, out, len)
                                                        : getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, out, len);
    if (rc == 0) return true;
    *error = errno;
    return false;
  };
}

bool ConnectionRouter::admit_client(const ListenerConfig& config, metrics::ListenerMetrics& counters, UniqueFd& fd) {
  if (config.clients.empty()) return true;
  sockaddr_storage peer{};
  socklen_t len = sizeof(peer);
  bool known = getpeername(fd.get(), reinterpret_cast<sockaddr*>(&peer), &len) == 0;
  // An IPv4 client of a dual-stack listener arrives as ::ffff:a.b.c.d; its
  // clients: entries are written as IPv4.
  auto* six = reinterpret_cast<sockaddr_in6*>(&peer);
  if (known && peer.ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&six->sin6_addr)) {
    sockaddr_in four{};
    four.sin_family = AF_INET;
    four.sin_port = six->sin6_port;
    std::memcpy(&four.sin_addr, six->sin6_addr.s6_addr + 12, 4);
    std::memcpy(&peer, &four, sizeof(four));
    len = sizeof(four);
  }
  if (known && config.admits(reinterpret_cast<const sockaddr*>(&peer))) return true;
  counters.accepted.add();
  w_.metrics.failed(metrics::StreamFailure::kRejected);
  std::string client = known ? sockaddr_to_string(reinterpret_cast<const sockaddr*>(&peer), len) : "unknown";
  local::AccessRecord record;
  record.direction = "outbound";
  record.listener = config.name;
  record.client = client;
  record.reason = "client-refused: not among the listener's clients";
  if (local::AccessLog* log = w_.host.access_log) log->write_refused(record);
  uint64_t suppressed = 0;
  if (client_log_.allow(w_.loop.now(), &suppressed)) {
    log::Line line = log::warn("client_refused");
    line.kv("listener", config.name)
        .kv("client", client)
        .kv("reason", known ? "not among the listener's clients" : "its address is unknown (it left already)");
    if (suppressed) line.kv("suppressed", suppressed);
  }
  set_abortive_close(fd.get());  // closed as the caller returns: the application sees a reset
  return false;
}

bool ConnectionRouter::admit_within_limits(const ListenerSocket& socket, metrics::ListenerMetrics& counters,
                                           UniqueFd& fd, local::ListenerTerms* terms) {
  const ListenerConfig& config = socket.config;
  local::ListenerLoad& load = *socket.fds->load();
  // The rate first: a connection it refuses never held a place in the count.
  bool within_rate = load.take_accept(config.accepts_per_second);
  if (within_rate && load.try_open(config.max_connections)) {
    terms->slot = local::ListenerSlot(socket.fds->load());
    terms->idle_timeout_ms = config.idle_timeout_ms;
    return true;
  }
  counters.accepted.add();
  (within_rate ? counters.refused_max_connections : counters.refused_accept_rate).add();
  w_.metrics.failed(metrics::StreamFailure::kLimit);
  std::string client = peer_address(fd.get());
  local::AccessRecord record;
  record.direction = "outbound";
  record.listener = config.name;
  record.client = client;
  record.reason = within_rate ? "limit: max_connections" : "limit: accepts_per_second";
  if (local::AccessLog* log = w_.host.access_log) log->write_refused(record);
  uint64_t suppressed = 0;
  if (client_log_.allow(w_.loop.now(), &suppressed)) {
    log::Line line = log::warn("connection_refused");
    line.kv("listener", config.name).kv("client", client);
    if (within_rate)
      line.kv("limit", "max_connections").kv("max", config.max_connections).kv("open", load.open());
    else
      line.kv("limit", "accepts_per_second").kv("per_second", config.accepts_per_second);
    if (suppressed) line.kv("suppressed", suppressed);
  }
  set_abortive_close(fd.get());  // closed as the caller returns: the application sees a reset
  return false;
}

void ConnectionRouter::on_accept(const ListenerSocket& socket, metrics::ListenerMetrics& counters,
                                 tunnel::PeerLink* link, UniqueFd fd) {
  const ListenerConfig& config = socket.config;
  if (!admit_client(config, counters, fd)) return;
  local::ListenerTerms terms;
  if (!admit_within_limits(socket, counters, fd, &terms)) return;
  if (config.transparent) {
    on_transparent_accept(config, counters, std::move(fd), std::move(terms));
    return;
  }
  std::string target = config.target.to_string();
  if (w_.hand_over(*link, fd, config.name, target, terms, {}, nullptr)) return;
  link->submit(local::LocalStream::from_client(w_.host, std::move(fd), config.name, &counters, config.peer, target, {},
                                               {}, std::move(terms)));
}

void ConnectionRouter::on_transparent_accept(const ListenerConfig& l, metrics::ListenerMetrics& counters, UniqueFd fd,
                                             local::ListenerTerms terms) {
  sockaddr_storage dst{};
  socklen_t len = sizeof(dst);
  int error = 0;
  bool known = w_.original_destination(fd.get(), l, &dst, &len, &error);
  auto reject = [&](std::string_view reason, const std::string& destination) {
    counters.accepted.add();
    w_.metrics.failed(metrics::StreamFailure::kRejected);
    std::string client = peer_address(fd.get());
    std::string why = "rejected: " + std::string(reason);
    local::AccessRecord record;
    record.direction = "outbound";
    record.listener = l.name;
    record.client = client;
    record.destination = destination;
    record.reason = why;
    if (local::AccessLog* log = w_.host.access_log) log->write_refused(record);
    log::warn("stream_rejected").kv("listener", l.name).kv("destination", destination).kv("reason", reason);
    set_abortive_close(fd.get());  // the fd closes as this returns: the application sees RST
  };
  if (!known) {
    reject(std::string("no original destination (not redirected by iptables?): ") + strerror(error), "?");
    return;
  }
  std::string destination = sockaddr_to_string(reinterpret_cast<sockaddr*>(&dst), len);
  // A connection made straight to this listener (not redirected) has the
  // listener itself as its original destination: a passthrough route would
  // connect rdmagw to itself, again and again, until no descriptor is left.
  sockaddr_storage here{};
  socklen_t here_len = sizeof(here);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&here), &here_len) == 0 &&
      sockaddr_to_string(reinterpret_cast<sockaddr*>(&here), here_len) == destination) {
    reject("not redirected: a connection straight to the transparent listener", destination);
    return;
  }
  for (const RouteConfig& route : l.routes) {
    if (!route.match.matches(reinterpret_cast<sockaddr*>(&dst))) continue;
    switch (route.action) {
      case RouteConfig::Action::kReject:
        reject("route " + route.match.to_string() + " says reject", destination);
        return;
      case RouteConfig::Action::kPassthrough:
        counters.accepted.add();
        local::DirectPipe::start(w_.host, std::move(fd), dst, len, l.name, &counters, {}, std::move(terms));
        return;
      case RouteConfig::Action::kService: {
        std::string why;
        if (!route_to_service(l, counters, fd, dst, destination, terms, &why))
          continue;                                // not in the file: the next route decides
        if (fd.valid()) reject(why, destination);  // a Service without a ready endpoint
        return;
      }
      case RouteConfig::Action::kTunnel: {
        std::string target = route.has_target ? route.target.to_string() : "tcp:" + destination;
        std::string why = "route names an unknown peer";
        tunnel::PeerLink* link = route.by_destination ? w_.links.discover(reinterpret_cast<sockaddr*>(&dst), &why)
                                                      : w_.links.find(route.peer);
        if (!link) {
          reject(why, destination);
          return;
        }
        log::debug("stream_routed").kv("listener", l.name).kv("destination", destination).kv("peer", link->name());
        if (w_.hand_over(*link, fd, l.name, target, terms, destination, nullptr)) return;
        link->submit(local::LocalStream::from_client(w_.host, std::move(fd), l.name, &counters, link->name(), target,
                                                     destination, {}, std::move(terms)));
        return;
      }
    }
  }
  reject("no route matches", destination);
}

sockaddr_storage ConnectionRouter::service_tunnel_address(const ServiceTable& table,
                                                          const ServiceTable::Endpoint& endpoint,
                                                          const sockaddr_storage& endpoint_address) const {
  sockaddr_storage via{};  // AF_UNSPEC: reached directly
  if (ServiceTable::has_rdmagw(endpoint)) return endpoint_address;
  const services_table::AddressRecord* node = table.node_tunnel(endpoint);
  // A pod on the node's own network (at the node's address) is reached
  // directly: the node's rdmagw opens nothing on its own host's addresses.
  if (!node || *node == endpoint.address || w_.host_facts.is_this_host(*node)) return via;
  service_address::to_sockaddr(*node, 0, &via);
  return via;
}

bool ConnectionRouter::route_to_service(const ListenerConfig& l, metrics::ListenerMetrics& counters, UniqueFd& fd,
                                        const sockaddr_storage& dst, const std::string& destination,
                                        local::ListenerTerms& terms, std::string* why_refused) {
  ServiceRouter::Choice choice = w_.services.choose(reinterpret_cast<const sockaddr*>(&dst));
  if (choice.kind == ServiceRouter::Choice::Kind::kUnknown) return false;
  const ServiceTable& table = *w_.services.table();  // set: the choice found something in it
  if (choice.kind == ServiceRouter::Choice::Kind::kNoEndpoint) {
    // As kube-proxy does: refused, not left to time out.
    *why_refused = "the Service has no ready endpoint (" + table.service_name(*choice.port) + ")";
    return true;
  }
  const auto* address = reinterpret_cast<const sockaddr*>(&choice.address);
  std::string endpoint = sockaddr_to_string(address, choice.address_len);
  const ServicesDirect direct = w_.config->services.direct;
  // The endpoint's own rdmagw, when its pod has one (sidecars accept
  // tunnels at the pod's address), else its node's, when a node-mode
  // rdmagw runs there (it accepts tunnels at the node's address and admits
  // the endpoints of its own node, `services:this-node`); peer_cidrs says
  // which addresses may be dialled at all. A node-mode rdmagw routing to a
  // pod of its own node reaches it directly: a tunnel to itself would only
  // add two hops.
  const sockaddr_storage via = service_tunnel_address(table, *choice.endpoint, choice.address);
  tunnel::PeerLink* link = nullptr;
  if (via.ss_family != AF_UNSPEC) {
    std::string why;
    link = w_.links.discover(reinterpret_cast<const sockaddr*>(&via), &why);
    // A label that lies (or a sidecar that is gone while its endpoint is
    // still listed ready): the endpoint's tunnel port refused this worker's
    // last dial. Only with services.direct: fallback do its connections go
    // directly for a while (then the tunnel is tried again), as do the
    // streams that waited for the refused dial (divert_on_refusal).
    // Otherwise a reset on the path would take them out of the tunnel:
    // they wait for a session, and are reset if none comes.
    if (link && direct == ServicesDirect::kFallback && w_.links.refused_recently(*link)) {
      why = "its tunnel port refused the connection (no rdmagw there, whatever the label says)";
      link = nullptr;
    }
    if (!link && direct != ServicesDirect::kFallback) {
      const std::string whose =
          ServiceTable::has_rdmagw(*choice.endpoint)
              ? "has rdmagw"
              : "is behind its node's rdmagw at " + sockaddr_ip_text(reinterpret_cast<const sockaddr*>(&via));
      *why_refused = "the endpoint " + endpoint + " of " + table.service_name(*choice.port) + " " + whose + ", but " +
                     why + "; services.direct is " + std::string(services_direct_name(direct)) +
                     ", so it is not reached outside the tunnel";
      return true;
    }
    uint64_t suppressed = 0;
    if (!link && service_log_.allow(w_.loop.now(), &suppressed)) {
      log::Line line = log::warn("service_endpoint_direct");
      line.kv("service", table.service_name(*choice.port)).kv("endpoint", endpoint).kv("reason", why);
      if (suppressed) line.kv("suppressed", suppressed);
    }
  } else if (direct == ServicesDirect::kNever && !table.node_tunnel(*choice.endpoint)) {
    *why_refused = "the endpoint " + endpoint + " of " + table.service_name(*choice.port) +
                   " has no rdmagw, and services.direct is never (every endpoint through its rdmagw)";
    return true;
  }
  if (log::enabled(log::Level::kDebug))  // the Service's name is built only for the line
    log::debug("stream_routed")
        .kv("listener", l.name)
        .kv("destination", destination)
        .kv("service", table.service_name(*choice.port))
        .kv("endpoint", endpoint)
        .kv("peer", link ? link->name() : std::string("none (direct)"));
  if (!link) {
    // The file names where this goes: never rdmagw's own admin or tunnel port.
    Endpoint direct_to;
    direct_to.addr = choice.address;
    direct_to.addr_len = choice.address_len;
    if (std::string own = w_.host_facts.own_port_problem(direct_to); !own.empty()) {
      *why_refused = "the endpoint " + endpoint + " of " + table.service_name(*choice.port) + ": " + own;
      return true;
    }
    counters.accepted.add();
    local::DirectPipe::start(w_.host, std::move(fd), choice.address, choice.address_len, l.name, &counters,
                             std::move(choice.lease), std::move(terms));
    return true;
  }
  std::string target = "tcp:" + endpoint;
  // Handed to another worker (tunnel.sessions_per_peer), it is not counted
  // there: counts are one worker's and never cross threads.
  // Where to go if the tunnel port refuses: only with services.direct: fallback.
  const sockaddr_storage* fallback = direct == ServicesDirect::kFallback ? &choice.address : nullptr;
  if (w_.hand_over(*link, fd, l.name, target, terms, destination, fallback)) return true;
  auto* stream = local::LocalStream::from_client(w_.host, std::move(fd), l.name, &counters, link->name(), target,
                                                 destination, std::move(choice.lease), std::move(terms));
  if (fallback) stream->reach_directly_if_refused(*fallback, choice.address_len);
  link->submit(stream);
  return true;
}

}  // namespace rdmagw
