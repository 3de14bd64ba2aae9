// SPDX-License-Identifier: Apache-2.0
// The local legs past TCP (local_legs.redirect; docs/architecture.md,
// "Local legs past TCP"): the programs loaded and attached once at start,
// the listeners' ports named to them, and what /stats and /metrics say.
#include "common/log.h"
#include "proxy/local/redirected_leg.h"
#include "proxy/runtime/runtime.h"

namespace rdmagw {

void Runtime::attach_local_legs() {
  const LocalLegsConfig& legs = config_->local_legs;
  if (!legs.redirect) return;
  local_legs_.cgroup = legs.cgroup;
  local_legs_.max_in_flight = legs.max_in_flight;
  std::string why;
  local_redirect_ = local::LocalRedirect::attach({legs.cgroup, legs.max_in_flight}, &why);
  if (local_redirect_ && !local::probe_redirect(*local_redirect_, &why)) local_redirect_.reset();
  if (!local_redirect_) {
    // Said once; the legs run on TCP as with the mode off.
    local_legs_.state = "unavailable";
    local_legs_.reason = why;
    log::warn("local_legs_unavailable").kv("cgroup", legs.cgroup).kv("reason", why).kv("legs", "tcp");
    return;
  }
  local_legs_.state = "redirected";
  redirect_listener_ports(listeners_);
  log::info("local_legs_redirected").kv("cgroup", legs.cgroup).kv("max_in_flight", legs.max_in_flight);
}

void Runtime::redirect_listener_ports(const ListenerSet& listeners) {
  if (!local_redirect_) return;
  for (const auto& l : listeners) {
    // A transparent listener's clients reach it through NAT, not as one
    // loopback connection: their legs stay on TCP.
    uint16_t port = endpoint_port(l->config.listen);
    if (l->config.transparent || port == 0) continue;
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
