// SPDX-License-Identifier: Apache-2.0
// The local legs past TCP (local_legs.redirect; docs/architecture.md,
// "Local legs past TCP"): the programs loaded and attached once at start,
// the listeners' ports named to them, and what /stats and /metrics say.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/log.h"
#include "proxy/local/cgroup_locator.h"
#include "proxy/local/redirected_leg.h"
#include "proxy/runtime/runtime.h"

namespace rdmagw {

bool Runtime::attach_local_legs(std::string* error) {
  const LocalLegsConfig& legs = config_->local_legs;
  if (inherited_legs_) return adopt_local_legs(error);
  if (!legs.redirect) return true;
  local_legs_.max_in_flight = legs.max_in_flight;
  std::string why;
  std::optional<std::string> cgroup = local::locate_legs_cgroup(legs.cgroup, legs.cgroup_fs, &why);
  local_legs_.cgroup = cgroup.value_or(legs.cgroup);
  if (cgroup)
    local_redirect_ = local::LocalRedirect::attach({*cgroup, legs.max_in_flight, ::geteuid(), ::getegid()}, &why);
  if (local_redirect_ && !local::probe_redirect(*local_redirect_, &why)) local_redirect_.reset();
  if (!local_redirect_) {
    // Said once; the legs run on TCP as with the mode off.
    local_legs_.state = "unavailable";
    local_legs_.reason = why;
    log::warn("local_legs_unavailable").kv("cgroup", local_legs_.cgroup).kv("reason", why).kv("legs", "tcp");
    return true;
  }
  local_legs_.state = "redirected";
  redirect_listener_ports(listeners_);
  log::info("local_legs_redirected").kv("cgroup", local_legs_.cgroup).kv("max_in_flight", legs.max_in_flight);
  return true;
}

bool Runtime::adopt_local_legs(std::string* error) {
  // The connections we inherit have flows in the old process's maps (bytes
  // redirected to them, counted as read or not): they stay in those maps,
  // with this build's programs on them, or the takeover does not happen.
  const LocalLegsConfig& legs = config_->local_legs;
  local::LocalRedirectHandover handover = std::move(*inherited_legs_);
  inherited_legs_.reset();
  if (!legs.redirect) {
    *error =
        "the running rdmagw redirects its local legs and this configuration does not (local_legs.redirect): "
        "restart it instead";
    return false;
  }
  std::string why;
  std::optional<std::string> cgroup = local::locate_legs_cgroup(legs.cgroup, legs.cgroup_fs, &why);
  if (cgroup)
    local_redirect_ =
        local::LocalRedirect::adopt({*cgroup, legs.max_in_flight, ::geteuid(), ::getegid()}, std::move(handover), &why);
  if (!local_redirect_) {
    *error = "cannot adopt the running rdmagw's local legs: " + why + "; restart it instead";
    return false;
  }
  // Before any worker admits a connection: the inherited streams' read
  // counters are theirs.
  for (const auto& worker : worker_imports_)
    for (const WorkerImage& image : worker)
      for (const auto& stream : image.connections.streams)
        if (!local::claim_leg_slot(*local_redirect_, stream.leg)) {
          *error = "the takeover's image names read counter " + std::to_string(stream.leg.slot) + " twice";
          local_redirect_.reset();
          return false;
        }
  local_legs_.cgroup = *cgroup;
  local_legs_.max_in_flight = legs.max_in_flight;
  local_legs_.state = "redirected";
  redirect_listener_ports(listeners_);
  log::info("local_legs_adopted").kv("cgroup", local_legs_.cgroup).kv("max_in_flight", legs.max_in_flight);
  return true;
}

void Runtime::take_charge_of_local_legs() {
  std::string why;
  if (local_redirect_ && !local_redirect_->take_charge(&why))
    log::warn("local_legs_programs_kept").kv("reason", why).kv("legs", "redirected by the old process's programs");
  // The captures in the shared map are now this process's (its listeners,
  // its routes).
  redirect_listener_ports(listeners_);
}

namespace {

// What a transparent listener takes at connect() with the local legs
// redirected: its routes to a peer or a Service (IPv4), which it routes
// as after iptables. Passthrough and reject routes stay with iptables:
// their connections gain nothing from coming here.
std::vector<local::ConnectCapture> connect_captures(const ListenerSet& listeners) {
  std::vector<local::ConnectCapture> out;
  for (const auto& l : listeners) {
    const ListenerConfig& config = l->config;
    if (!config.transparent || config.listen.addr.ss_family != AF_INET) continue;
    uint32_t bound = reinterpret_cast<const sockaddr_in&>(config.listen.addr).sin_addr.s_addr;
    if (bound != htonl(INADDR_LOOPBACK) && bound != htonl(INADDR_ANY)) continue;  // 127.0.0.1 must reach it
    for (const RouteConfig& route : config.routes) {
      if (route.action != RouteConfig::Action::kTunnel && route.action != RouteConfig::Action::kService) continue;
      if (route.match.family != AF_INET) continue;
      local::ConnectCapture c;
      std::memcpy(&c.address, route.match.address, 4);
      c.mask = route.match.prefix == 0 ? 0 : htonl(~uint32_t{0} << (32 - route.match.prefix));
      c.port_lo = route.match.port_lo;
      c.port_hi = route.match.port_hi;
      c.to_port = endpoint_port(config.listen);
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

void Runtime::redirect_listener_ports(const ListenerSet& listeners) {
  if (!local_redirect_) return;
  std::vector<local::ConnectCapture> captures = connect_captures(listeners);
  std::string why;
  bool captured = local_redirect_->set_captures(captures, &why);
  if (!captured) {
    captures.clear();
    local_redirect_->set_captures({}, &why);
    if (!capture_refusal_logged_) {
      log::warn("local_legs_capture_unavailable").kv("reason", why).kv("transparent", "by iptables, legs on TCP");
      capture_refusal_logged_ = true;
    }
  }
  for (const auto& l : listeners) {
    // A transparent listener's clients reach it through NAT, not as one
    // loopback connection, unless captured at connect(): only then are
    // their legs redirected.
    uint16_t port = endpoint_port(l->config.listen);
    bool captured_here = std::any_of(captures.begin(), captures.end(),
                                     [&](const local::ConnectCapture& c) { return c.to_port == port; });
    if ((l->config.transparent && !captured_here) || port == 0) continue;
    std::string why;
    if (!local_redirect_->add_port(port, &why))
      log::warn("local_legs_port_refused").kv("listener", l->config.name).kv("reason", why).kv("legs", "tcp");
  }
}

admin::LocalLegsStatus Runtime::local_legs_status() const {
  admin::LocalLegsStatus s = local_legs_;
  if (local_redirect_) s.counters = local_redirect_->stats();
  return s;
}

}  // namespace rdmagw
