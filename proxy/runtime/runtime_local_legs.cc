// SPDX-License-Identifier: Apache-2.0
// The local legs past TCP (local_legs.redirect; docs/architecture.md,
// "Local legs past TCP"): the programs loaded and attached once at start,
// the listeners' ports named to them, and what /stats and /metrics say.
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
  if (cgroup) local_redirect_ = local::LocalRedirect::attach({*cgroup, legs.max_in_flight}, &why);
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
  if (cgroup) local_redirect_ = local::LocalRedirect::adopt({*cgroup, legs.max_in_flight}, std::move(handover), &why);
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
