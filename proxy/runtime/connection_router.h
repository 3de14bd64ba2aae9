// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where a connection a worker's listener accepted goes. First whether it is
// admitted at all (listeners[].clients, max_connections,
// accepts_per_second: refused ones are reset, counted, logged and written
// to the access log); then, for a transparent listener, the first route
// that matches its original destination (reject, passthrough, a Service's
// endpoint through its rdmagw or directly, a named or discovered peer);
// else the listener's own peer. A stream for a peer whose session another
// worker holds (tunnel.sessions_per_peer) is handed there by the worker
// (HandOver).
#include <sys/socket.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/address.h"
#include "common/log_limiter.h"
#include "common/metrics.h"
#include "common/unique_fd.h"
#include "config/config.h"
#include "config/services_table.h"
#include "proxy/io/event_loop.h"
#include "proxy/local/local_redirect.h"
#include "proxy/local/stream_host.h"
#include "proxy/local/stream_info.h"
#include "proxy/runtime/listener_sockets.h"
#include "proxy/runtime/peer_links.h"
#include "proxy/runtime/peer_targets.h"
#include "proxy/runtime/service_router.h"

namespace rdmagw {

class ConnectionRouter {
 public:
  // tunnel.sessions_per_peer: true once the stream went to the worker that
  // holds `link`'s peer (fd and terms taken); false: carry it here.
  // `destination`: a transparent listener's original destination;
  // `direct`: a Service endpoint's address, where to go if the tunnel port
  // refuses.
  using HandOver =
      std::function<bool(tunnel::PeerLink& link, UniqueFd& fd, const std::string& listener, const std::string& target,
                         local::ListenerTerms& terms, const std::string& destination, const sockaddr_storage* direct)>;
  // Where a transparent listener's connection `fd` meant to go: true with
  // *out and *len set; false with errno's value in *error.
  using OriginalDestination =
      std::function<bool(int fd, const ListenerConfig& listener, sockaddr_storage* out, socklen_t* len, int* error)>;
  // The kernel's answer: where the connect4 program kept it by the client's
  // end (`redirect`, null when the local legs are not redirected), else
  // netfilter's (iptables REDIRECT).
  static OriginalDestination from_kernel(local::LocalRedirect* redirect);

  struct Wiring {
    EventLoop& loop;
    local::StreamHost& host;
    metrics::WorkerMetrics& metrics;
    PeerLinks& links;
    ServiceRouter& services;
    // The worker's configuration, as reloads replace it.
    const std::shared_ptr<const Config>& config;
    // A transparent listener's connections' destinations (from_kernel).
    OriginalDestination original_destination;
    // What this host is: its own addresses, rdmagw's own ports.
    PeerTargets& host_facts;
    HandOver hand_over;
  };
  explicit ConnectionRouter(Wiring wiring) : w_(std::move(wiring)) {}

  // A connection `socket`'s listener accepted; `link`: a non-transparent
  // listener's peer (its streams go there).
  void on_accept(const ListenerSocket& socket, metrics::ListenerMetrics& counters, tunnel::PeerLink* link, UniqueFd fd);

 private:
  // listeners[].clients: false (the connection reset, logged, counted) if
  // the application's address is not among them.
  bool admit_client(const ListenerConfig& config, metrics::ListenerMetrics& counters, UniqueFd& fd);
  // listeners[].max_connections and accepts_per_second: false (the
  // connection reset, logged, counted) past either; else *terms is the
  // connection's place in the count, and its idle timeout.
  bool admit_within_limits(const ListenerSocket& socket, metrics::ListenerMetrics& counters, UniqueFd& fd,
                           local::ListenerTerms* terms);
  void on_transparent_accept(const ListenerConfig& config, metrics::ListenerMetrics& counters, UniqueFd fd,
                             local::ListenerTerms terms);
  // `action: service`: false if the file does not know the destination (the
  // next route decides); true once it is carried, or (`fd` left open,
  // *why_refused set) when the caller must reject it: no ready endpoint, or
  // one that services.direct keeps from being reached outside the tunnel.
  // `terms` go with the connection once it is carried.
  bool route_to_service(const ListenerConfig& config, metrics::ListenerMetrics& counters, UniqueFd& fd,
                        const sockaddr_storage& destination, const std::string& destination_text,
                        local::ListenerTerms& terms, std::string* why_refused);
  // Where the rdmagw that carries a Service endpoint's streams accepts
  // tunnels: the endpoint's own (its pod's sidecar) or its node's; AF_UNSPEC
  // when there is none, or it is this host's own (reached directly).
  sockaddr_storage service_tunnel_address(const ServiceTable& table, const ServiceTable::Endpoint& endpoint,
                                          const sockaddr_storage& endpoint_address) const;

  Wiring w_;
  // client_refused and connection_refused lines (a listener's clients:
  // leaves the address out).
  log::LogLimiter client_log_{5, 20};
  // Endpoints said to have rdmagw that lie outside tunnel.peer_cidrs: a
  // line a second at most.
  log::LogLimiter service_log_{1, 5};
};

}  // namespace rdmagw
