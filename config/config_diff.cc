// SPDX-License-Identifier: Apache-2.0
#include "config/config_diff.h"

#include <functional>

#include "config/number_keys.h"

namespace rdmagw {

namespace {

std::string text(const std::string& v) { return "'" + v + "'"; }
template <class T>
std::string text(const T& v) {
  return std::to_string(v);
}
std::string text(TransportMode m) { return std::string(transport_mode_name(m)); }
std::string text(AuthMode m) { return std::string(auth_mode_name(m)); }
std::string text(bool b) { return b ? "true" : "false"; }

bool same_secrets(const std::shared_ptr<const SecretKeys>& a, const std::shared_ptr<const SecretKeys>& b) {
  return a == b || (a && b && *a == *b);
}

struct Differ {
  std::vector<std::string>* out;
  template <class T>
  void check(std::string_view key, const T& running, const T& next) {
    if (!(running == next)) out->push_back(std::string(key) + ": " + text(running) + " -> " + text(next));
  }
  // Every key of number_keys.h that a reload treats as `on_reload`.
  void check_numbers(config_keys::OnReload on_reload, const Config& running, const Config& next) {
    for (const config_keys::NumberKey& k : config_keys::kNumberKeys)
      if (k.on_reload == on_reload) check(config_keys::number_key_path(k), k.get(running), k.get(next));
  }
};

bool same_routes(const std::vector<RouteConfig>& a, const std::vector<RouteConfig>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].match.to_string() != b[i].match.to_string() || a[i].action != b[i].action || a[i].peer != b[i].peer ||
        a[i].by_destination != b[i].by_destination || a[i].has_target != b[i].has_target ||
        (a[i].has_target && !(a[i].target == b[i].target)))
      return false;
  }
  return true;
}

std::string match_text(const std::vector<RouteMatch>& matches) {
  std::string out;
  for (const auto& m : matches) out += m.to_string() + ",";
  return out;
}

bool same_listener(const ListenerConfig& a, const ListenerConfig& b) {
  return a.listen == b.listen && a.transparent == b.transparent && a.peer == b.peer &&
         (a.transparent || a.target == b.target) && same_routes(a.routes, b.routes) && a.socket_mode == b.socket_mode &&
         match_text(a.clients) == match_text(b.clients) && a.max_connections == b.max_connections &&
         a.accepts_per_second == b.accepts_per_second && a.idle_timeout_ms == b.idle_timeout_ms;
}

bool same_peer(const PeerConfig& a, const PeerConfig& b) {
  return a.address == b.address && a.tcp_port == b.tcp_port && a.rdma_port == b.rdma_port &&
         a.always_connected == b.always_connected;
}

std::string cidr_text(const std::vector<PeerCidr>& cidrs) {
  std::string out;
  for (const auto& c : cidrs) {
    if (!out.empty()) out += ",";
    out += c.cidr.to_string() + "(" + std::to_string(c.tcp_port) + "/" + std::to_string(c.rdma_port) + ")";
  }
  return out.empty() ? "none" : out;
}

// "<kind> <name> added|removed|changed" for entries matched by name.
template <class Entry>
void diff_named(const char* kind, const std::vector<Entry>& running, const std::vector<Entry>& next,
                const std::function<bool(const Entry&, const Entry&)>& same, std::vector<std::string>* out) {
  for (const auto& n : next) {
    const Entry* old = nullptr;
    for (const auto& r : running)
      if (r.name == n.name) old = &r;
    if (!old)
      out->push_back(std::string(kind) + " " + n.name + " added");
    else if (!same(*old, n))
      out->push_back(std::string(kind) + " " + n.name + " changed");
  }
  for (const auto& r : running) {
    bool kept = false;
    for (const auto& n : next) kept = kept || n.name == r.name;
    if (!kept) out->push_back(std::string(kind) + " " + r.name + " removed");
  }
}

size_t count_missing(const std::vector<TargetRule>& from, const std::vector<TargetRule>& in) {
  size_t n = 0;
  for (const auto& e : from) {
    bool found = false;
    for (const auto& o : in) found = found || o == e;
    if (!found) ++n;
  }
  return n;
}

}  // namespace

std::vector<std::string> restart_only_changes(const Config& running, const Config& next) {
  std::vector<std::string> out;
  Differ d{&out};
  d.check("node", running.node, next.node);
  d.check("admin", running.admin, next.admin);
  d.check("workers", running.workers, next.workers);
  if (running.worker_cpus != next.worker_cpus) out.push_back("worker_cpus changed");
  const TunnelConfig& a = running.tunnel;
  const TunnelConfig& b = next.tunnel;
  d.check("tunnel.address", a.address, b.address);
  d.check("tunnel.tcp_port", a.tcp_port, b.tcp_port);
  d.check("tunnel.rdma_port", a.rdma_port, b.rdma_port);
  d.check("tunnel.transport", a.transport, b.transport);
  d.check("tunnel.tcp_splice", a.tcp_splice, b.tcp_splice);
  d.check_numbers(config_keys::OnReload::kRestart, running, next);
  d.check("tunnel.rdma.device", a.rdma.device, b.rdma.device);
  d.check("tunnel.rdma.max_pinned", a.rdma.max_pinned, b.rdma.max_pinned);
  // Keys rotate on reload; whether peers authenticate at all does not change
  // under live sessions.
  d.check("tunnel.auth.mode", a.auth.mode, b.auth.mode);
  d.check("tunnel.auth.encrypt", a.auth.encrypt, b.auth.encrypt);
  // The programs are attached once, at start.
  d.check("local_legs.redirect", running.local_legs.redirect, next.local_legs.redirect);
  d.check("local_legs.cgroup", running.local_legs.cgroup, next.local_legs.cgroup);
  d.check("local_legs.cgroup_fs", running.local_legs.cgroup_fs, next.local_legs.cgroup_fs);
  return out;
}

std::vector<std::string> describe_changes(const Config& running, const Config& next) {
  std::vector<std::string> out;
  diff_named<ListenerConfig>("listener", running.listeners, next.listeners, same_listener, &out);
  diff_named<PeerConfig>("peer", running.peers, next.peers, same_peer, &out);
  size_t added = count_missing(next.targets, running.targets);
  size_t removed = count_missing(running.targets, next.targets);
  if (added || removed)
    out.push_back("targets: " + std::to_string(added) + " added, " + std::to_string(removed) + " removed");
  Differ d{&out};
  d.check("log_level", running.log_level, next.log_level);
  d.check("shutdown_timeout_ms", running.shutdown_timeout_ms, next.shutdown_timeout_ms);
  d.check("tunnel.peer_cidrs", cidr_text(running.tunnel.peer_cidrs), cidr_text(next.tunnel.peer_cidrs));
  d.check_numbers(config_keys::OnReload::kApply, running, next);
  const AccessLogConfig& al = running.access_log;
  const AccessLogConfig& nl = next.access_log;
  d.check("access_log.enabled", al.enabled, nl.enabled);
  d.check("access_log.path", al.path, nl.path);
  d.check("access_log.format", std::string(al.json ? "json" : "kv"), std::string(nl.json ? "json" : "kv"));
  d.check("services.file", running.services.file, next.services.file);
  d.check("services.direct", std::string(services_direct_name(running.services.direct)),
          std::string(services_direct_name(next.services.direct)));
  // Key files are read again on every reload, so a key rotated in place
  // (the same file, new content) counts as a change too.
  const AuthConfig& ra = running.tunnel.auth;
  const AuthConfig& na = next.tunnel.auth;
  if (ra.key_files != na.key_files || !same_secrets(ra.keys, na.keys))
    out.push_back("tunnel.auth: keys changed (" + std::to_string(na.key_files.size()) + " key files)");
  // Certificates rotate the same way: files read again, compared by content.
  bool same_credentials =
      ra.credentials && na.credentials ? ra.credentials->same_as(*na.credentials) : ra.credentials == na.credentials;
  if (ra.ca_files != na.ca_files || ra.cert_file != na.cert_file || ra.key_file != na.key_file || !same_credentials)
    out.push_back("tunnel.auth: certificate, key or CAs changed (" + std::to_string(na.ca_files.size()) + " CA files)");
  if (running.admin_token_file != next.admin_token_file || !same_secrets(running.admin_token, next.admin_token))
    out.push_back(next.admin_token_file.empty() ? "admin token removed" : "admin token changed");
  return out;
}

}  // namespace rdmagw
