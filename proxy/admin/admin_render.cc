// SPDX-License-Identifier: Apache-2.0
// The JSON answers. /metrics is in prometheus_text.cc.
#include "proxy/admin/admin_render.h"

#include <algorithm>
#include <cstdio>

#include "common/protocol_limits.h"
#include "config/number_keys.h"
#include "proxy/admin/json_writer.h"
#include "proxy/admin/metric_totals.h"

namespace rdmagw::admin {
namespace {

double us_to_seconds(uint64_t us) { return static_cast<double>(us) / 1e6; }

void write_latency(JsonWriter& w, std::string_view name, const HistogramTotals& h) {
  w.key(name).begin_object().field("count", h.count).field("sum_seconds", us_to_seconds(h.sum_us)).end_object();
}

void write_stats_config(JsonWriter& w, const Status& status, const metrics::ProcessMetrics& process) {
  w.key("config").begin_object();
  w.field("file", status.config_file);
  w.field("generation", status.config_generation);
  w.field("reloads", process.config_reloads.value());
  w.field("reload_failures", process.config_reload_failures.value());
  // Before the first reload the object is still there, with unix_time 0.
  w.key("last_reload").begin_object();
  w.field("ok", status.last_reload.ok);
  w.field("unix_time", status.last_reload_unix);
  w.string_array("changes", status.last_reload.changes);
  w.string_array("errors", status.last_reload.errors);
  w.end_object();
  w.end_object();
}

void write_stats_listeners(JsonWriter& w, const MetricTotals& totals) {
  w.key("listeners").begin_array();
  for (const ListenerTotals& l : totals.listeners) {
    w.begin_object();
    w.field("name", l.name).field("listen", l.listen).field("configured", l.configured);
    w.field("accepted", l.accepted).field("active", l.active);
    w.field("bytes_received", l.bytes_received).field("bytes_sent", l.bytes_sent);
    w.end_object();
  }
  w.end_array();
}

void write_stats_peers(JsonWriter& w, const MetricTotals& totals) {
  w.key("peers").begin_array();
  for (const PeerTotals& p : totals.peers) {
    w.begin_object();
    w.field("name", p.name).field("sessions_tcp", p.sessions_tcp).field("sessions_rdma", p.sessions_rdma);
    w.field("streams_opened", p.streams_opened);
    w.field("bytes_sent", p.bytes_sent).field("bytes_received", p.bytes_received);
    w.field("queued_bytes", p.bytes_queued);
    w.field("credit_stalls", p.credit_stalls).field("reconnects", p.reconnects);
    w.end_object();
  }
  w.end_array();
}

void write_stats_per_worker(JsonWriter& w, const MetricTotals& totals) {
  w.key("per_worker").begin_array();
  for (const WorkerTotals& t : totals.workers) {
    w.begin_object();
    w.field("worker", t.worker).field("sessions_tcp", t.sessions_tcp).field("sessions_rdma", t.sessions_rdma);
    w.field("streams_active", t.streams_active);
    w.field("bytes_sent", t.bytes_sent).field("bytes_received", t.bytes_received);
    w.field("buffer_bytes_in_use", t.buffer_bytes_in_use)
        .field("buffer_bytes_posted", t.buffer_bytes_posted)
        .field("buffer_bytes_resident", t.buffer_bytes_resident);
    w.end_object();
  }
  w.end_array();
}

void write_stats_streams(JsonWriter& w, const MetricTotals& totals) {
  w.key("streams").begin_object();
  w.field("opened_outbound", totals.streams_opened_outbound);
  w.field("opened_inbound", totals.streams_opened_inbound);
  w.field("active", totals.streams_active());
  w.key("failed").begin_object();
  for (size_t i = 0; i < totals.streams_failed.size(); ++i)
    w.field(metrics::stream_failure_name(static_cast<metrics::StreamFailure>(i)), totals.streams_failed[i]);
  w.end_object();
  w.end_object();
}

void write_session(JsonWriter& w, const SessionInfo& s) {
  w.begin_object();
  w.field("worker", s.worker).field("role", s.role).field("transport", s.transport).field("state", s.state);
  w.field("remote_address", s.remote_address).field("peer_node", s.peer_node);
  w.field("rtt_us", s.rtt_us).field("age_ms", s.age_ms);
  w.field("streams", s.streams).field("streams_opened", s.streams_opened).field("idle_ms", s.idle_ms);
  w.field("bytes_sent", s.bytes_sent).field("bytes_received", s.bytes_received);
  w.field("queued_bytes", s.queued_bytes);
  w.field("credit_stalls", s.credit_stalls);
  w.field("resumable", s.resumable).field("resumes", s.resumes).field("resent_bytes", s.resent_bytes);
  w.field("spliced_bytes", s.spliced_bytes);
  if (s.has_rdma) {
    w.key("rdma").begin_object();
    w.field("qp_state", s.qp_state).field("send_credits", s.send_credits);
    w.field("peer_recv_depth", s.peer_recv_depth).field("pending_returns", s.pending_returns);
    w.field("sends_in_flight", s.sends_in_flight).field("completions", s.completions);
    w.end_object();
  }
  w.end_object();
}

const char* route_action_name(RouteConfig::Action action) {
  switch (action) {
    case RouteConfig::Action::kTunnel:
      return "tunnel";
    case RouteConfig::Action::kPassthrough:
      return "passthrough";
    case RouteConfig::Action::kReject:
      return "reject";
    case RouteConfig::Action::kService:
      return "service";
  }
  return "tunnel";
}

// The numeric keys of `section` (config/number_keys.h). Byte sizes as plain
// numbers of bytes, which the YAML schema accepts too.
void write_number_keys(JsonWriter& w, const Config& config, std::string_view section) {
  for (const config_keys::NumberKey& k : config_keys::kNumberKeys)
    if (k.section == section) w.field(k.name, k.get(config));
}

void write_tunnel_config(JsonWriter& w, const Config& config) {
  const TunnelConfig& t = config.tunnel;
  w.key("tunnel").begin_object();
  w.field("address", t.address).field("tcp_port", t.tcp_port).field("rdma_port", t.rdma_port);
  w.field("transport", transport_mode_name(t.transport));
  write_number_keys(w, config, "tunnel");
  w.field("tcp_splice", t.tcp_splice);
  w.key("peer_cidrs").begin_array();
  for (const PeerCidr& c : t.peer_cidrs) {
    w.begin_object();
    w.field("cidr", c.cidr.to_string()).field("tcp_port", c.tcp_port).field("rdma_port", c.rdma_port);
    w.end_object();
  }
  w.end_array();
  w.key("rdma").begin_object();
  // No device configured means "any"; the key is left out rather than
  // written as "", which the YAML schema would not accept.
  if (!t.rdma.device.empty()) w.field("device", t.rdma.device);
  write_number_keys(w, config, "tunnel.rdma");
  // 0 in the file stands for a budget computed from the others: shown as it is.
  w.field("max_pinned", t.rdma.pinned_budget(t.buffer_size + kBufferHeadroom));
  w.end_object();
  w.key("limits").begin_object();
  write_number_keys(w, config, "tunnel.limits");
  w.end_object();
  // The files' paths, never what they hold.
  w.key("auth").begin_object().field("mode", auth_mode_name(t.auth.mode));
  if (t.auth.mode == AuthMode::kPsk) w.string_array("key_files", t.auth.key_files);
  if (t.auth.mode == AuthMode::kCert) {
    w.string_array("ca_files", t.auth.ca_files);
    w.field("cert_file", t.auth.cert_file).field("key_file", t.auth.key_file);
  }
  w.field("encrypt", t.auth.encrypt);
  w.end_object();
  w.end_object();
}

void write_listener_config(JsonWriter& w, const ListenerConfig& l) {
  w.begin_object();
  w.field("name", l.name).field("listen", listen_address_text(l));
  if (!l.transparent) {
    w.field("peer", l.peer).field("target", l.target.to_string());
  } else {
    w.key("routes").begin_array();
    for (const RouteConfig& r : l.routes) {
      w.begin_object();
      w.field("match", r.match.to_string()).field("action", route_action_name(r.action));
      if (r.action == RouteConfig::Action::kTunnel) w.field("peer", r.by_destination ? "destination" : r.peer);
      // Without a target the stream goes to its original destination,
      // which is per connection: there is no value to fill in.
      if (r.has_target) w.field("target", r.target.to_string());
      w.end_object();
    }
    w.end_array();
  }
  if (l.socket_mode != 0) {
    char mode[16];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(l.socket_mode));
    w.field("socket_mode", mode);
  }
  if (!l.clients.empty()) {
    w.key("clients").begin_array();
    for (const RouteMatch& c : l.clients) w.value(c.to_string());
    w.end_array();
  }
  // 0: no limit, as in the file.
  w.field("max_connections", l.max_connections)
      .field("accepts_per_second", l.accepts_per_second)
      .field("idle_timeout_ms", l.idle_timeout_ms);
  w.end_object();
}

// An entry that names who may open it in the mapping form, the others as
// the plain endpoint, as the file would write them.
void write_target_config(JsonWriter& w, const TargetRule& t) {
  if (t.peer_cidrs.empty() && t.peer_names.empty() && !t.proxy_protocol) {
    w.value(t.endpoint_text());
    return;
  }
  w.begin_object();
  w.field("target", t.endpoint_text());
  if (!t.peer_cidrs.empty() || !t.peer_names.empty()) {
    w.key("peers").begin_array();
    for (const RouteMatch& c : t.peer_cidrs) w.value(c.to_string());
    for (const std::string& name : t.peer_names) w.value(name);
    w.end_array();
  }
  if (t.proxy_protocol) w.field("proxy_protocol", "v2");
  w.end_object();
}

}  // namespace

void write_local_legs_status(JsonWriter& w, const LocalLegsStatus& s) {
  w.key("local_legs").begin_object();
  w.field("state", s.state).field("reason", s.reason).field("cgroup", s.cgroup);
  w.field("max_in_flight", s.max_in_flight);
  const local::LocalRedirectStats& c = s.counters;
  w.field("sockets_added", c.sockets_added).field("sockets_refused", c.sockets_refused);
  w.field("messages_redirected", c.messages_redirected).field("bytes_redirected", c.bytes_redirected);
  w.field("messages_tcp", c.messages_tcp).field("bytes_tcp", c.bytes_tcp);
  w.field("flows_to_tcp", c.flows_to_tcp);
  w.end_object();
}

void write_services_status(JsonWriter& w, const ServicesStatus& s) {
  w.key("services").begin_object();
  w.field("file", s.file).field("loaded", s.loaded).field("table_file", s.table_file);
  w.field("loaded_unix", s.loaded_unix).field("error", s.error);
  w.field("loads", s.loads).field("load_failures", s.load_failures);
  w.key("api").begin_object();
  w.field("reachable", s.api.reachable).field("since", s.api.since).field("error", s.api.error);
  w.end_object();
  w.field("services", s.services).field("endpoints", s.endpoints);
  w.end_object();
}

std::string render_stats_json(const Status& status, const Config* config, const WorkerMetricsList& workers,
                              const metrics::ProcessMetrics& process) {
  const MetricTotals totals = sum_metrics(config, workers);
  JsonWriter w;
  w.begin_object();
  w.field("version", status.version).field("commit", status.commit).field("node", status.node);
  w.field("uptime_seconds", status.uptime_seconds);
  w.field("ready", status.ready).field("draining", status.draining);
  w.field("workers", status.workers);
  w.field("transport", status.transport).field("transport_reason", status.transport_reason);
  w.field("io_uring", status.io_uring);
  write_stats_config(w, status, process);
  write_stats_listeners(w, totals);
  write_stats_peers(w, totals);
  write_stats_per_worker(w, totals);
  write_stats_streams(w, totals);
  write_services_status(w, status.services);
  write_local_legs_status(w, status.local_legs);
  w.key("rdma").begin_object();
  w.field("send_completions", totals.rdma_send_completions).field("recv_completions", totals.rdma_recv_completions);
  w.end_object();
  w.key("latency").begin_object();
  write_latency(w, "stream_open", totals.stream_open);
  write_latency(w, "target_connect", totals.target_connect);
  write_latency(w, "session_rtt", totals.session_rtt);
  w.end_object();
  w.end_object();
  return w.take();
}

std::string render_services_json(const ServicesReport& report) {
  JsonWriter w;
  w.begin_object();
  write_services_status(w, report.status);
  w.field("direct", report.direct);
  w.key("table").begin_array();
  if (const ServiceTable* table = report.table.get()) {
    for (const ServiceTable::Service& service : table->services()) {
      w.begin_object();
      w.field("namespace", table->text(service.namespace_name)).field("name", table->text(service.name));
      w.key("cluster_ips").begin_array();
      for (const auto& ip : table->cluster_ips(service)) w.value(service_address::text(ip));
      w.end_array();
      w.key("ports").begin_array();
      for (const ServiceTable::Port& port : table->ports(service)) {
        w.begin_object().field("name", table->text(port.name)).field("port", port.port);
        w.key("endpoints").begin_array();
        for (const ServiceTable::Endpoint& e : table->endpoints(port)) {
          const bool rdmagw = ServiceTable::has_rdmagw(e);
          // Without a sidecar of its own, its node's rdmagw carries it, if
          // the node has one.
          const auto* node_tunnel = rdmagw ? nullptr : table->node_tunnel(e);
          auto open = report.streams.find(ServiceTable::key(e));
          w.begin_object();
          w.field("address", service_address::text(e.address)).field("port", e.port);
          w.field("state", endpoint_state_name(ServiceTable::state(e))).field("rdmagw", rdmagw);
          w.field("pod", table->text(e.pod)).field("node", table->node_name(e));
          if (node_tunnel) w.field("node_rdmagw", service_address::text(*node_tunnel));
          w.field("streams", open == report.streams.end() ? uint64_t{0} : open->second);
          // Endpoints reached through an rdmagw: how the tunnel to it stands
          // (a refused or failing dial shows here, with services.direct
          // deciding what happens to their connections meanwhile).
          if (rdmagw || node_tunnel) {
            auto tunnel = report.tunnels.find(AddressPort{rdmagw ? e.address : *node_tunnel, 0});
            bool known = tunnel != report.tunnels.end();
            w.field("tunnel", known ? tunnel->second.state : std::string("idle"));
            w.field("tunnel_error", known ? tunnel->second.error : std::string());
          }
          w.end_object();
        }
        w.end_array().end_object();
      }
      w.end_array().end_object();
    }
  }
  w.end_array().end_object();
  return w.take();
}

std::string render_peers_json(const std::vector<PeerInfo>& peers) {
  JsonWriter w;
  w.begin_object().key("peers").begin_array();
  for (const PeerInfo& p : peers) {
    w.begin_object();
    w.field("name", p.name).field("configured", p.configured).field("discovered", p.discovered);
    if (!p.connect.empty()) w.field("connect", p.connect);
    w.field("address", p.address).field("tcp_port", p.tcp_port).field("rdma_port", p.rdma_port);
    w.field("transport", p.transport).field("transport_reason", p.transport_reason);
    w.field("state", p.state).field("last_error", p.last_error).field("waiting_streams", p.waiting_streams);
    w.field("last_close", p.last_close);
    w.key("sessions").begin_array();
    for (const SessionInfo& s : p.sessions) write_session(w, s);
    w.end_array();
    w.end_object();
  }
  w.end_array().end_object();
  return w.take();
}

std::string render_streams_json(const std::vector<StreamInfo>& streams, size_t offset, size_t limit) {
  JsonWriter w;
  w.begin_object();
  w.field("total", streams.size()).field("offset", offset).field("limit", limit);
  w.key("streams").begin_array();
  const size_t begin = std::min(offset, streams.size());
  const size_t end = begin + std::min(limit, streams.size() - begin);
  for (size_t i = begin; i < end; ++i) {
    const StreamInfo& s = streams[i];
    w.begin_object();
    w.field("worker", s.worker).field("side", s.side).field("listener", s.listener).field("peer", s.peer);
    w.field("target", s.target).field("stream_id", s.stream_id).field("age_ms", s.age_ms);
    w.field("connection", s.connection).field("client", s.client);
    w.field("bytes_from_app", s.bytes_from_app).field("bytes_to_app", s.bytes_to_app);
    w.field("state", s.state).field("queued_to_app", s.queued_to_app).field("send_credit", s.send_credit);
    w.field("waiting_for", s.waiting_for);
    w.field("local_leg", s.local_leg);
    w.end_object();
  }
  w.end_array().end_object();
  return w.take();
}

std::string render_config_json(const Config& config, uint64_t generation) {
  JsonWriter w;
  w.begin_object();
  w.field("node", config.node).field("admin", config.admin);
  if (!config.admin_token_file.empty()) w.field("admin_token_file", config.admin_token_file);
  w.field("workers", config.workers);
  if (!config.worker_cpus.empty()) {
    w.key("worker_cpus").begin_array();
    for (unsigned cpu : config.worker_cpus) w.value(cpu);
    w.end_array();
  }
  write_tunnel_config(w, config);
  w.key("peers").begin_array();
  for (const PeerConfig& p : config.peers) {
    w.begin_object();
    w.field("name", p.name).field("address", p.address).field("tcp_port", p.tcp_port).field("rdma_port", p.rdma_port);
    w.field("connect", p.always_connected ? "always" : "on_demand");
    w.end_object();
  }
  w.end_array();
  w.key("listeners").begin_array();
  for (const ListenerConfig& l : config.listeners) write_listener_config(w, l);
  w.end_array();
  w.key("targets").begin_array();
  for (const TargetRule& t : config.targets) write_target_config(w, t);
  w.end_array();
  w.key("access_log").begin_object().field("enabled", config.access_log.enabled);
  if (!config.access_log.path.empty()) w.field("path", config.access_log.path);
  w.field("format", config.access_log.json ? "json" : "kv");
  write_number_keys(w, config, "access_log");
  w.end_object();
  w.key("metrics").begin_object();
  write_number_keys(w, config, "metrics");
  w.end_object();
  if (!config.services.file.empty())
    w.key("services")
        .begin_object()
        .field("file", config.services.file)
        .field("direct", services_direct_name(config.services.direct))
        .end_object();
  w.key("local_legs")
      .begin_object()
      .field("redirect", config.local_legs.redirect)
      .field("cgroup", config.local_legs.cgroup)
      .field("cgroup_fs", config.local_legs.cgroup_fs);
  write_number_keys(w, config, "local_legs");
  w.end_object();
  w.field("shutdown_timeout_ms", config.shutdown_timeout_ms).field("log_level", config.log_level);
  w.field("generation", generation);
  w.end_object();
  return w.take();
}

std::string render_reload_json(const ReloadResult& result, uint64_t generation) {
  JsonWriter w;
  w.begin_object().field("ok", result.ok);
  if (result.ok) {
    w.field("generation", generation).string_array("changes", result.changes);
  } else {
    w.string_array("errors", result.errors);
  }
  w.end_object();
  return w.take();
}

std::string render_drain_json(uint64_t streams_open) {
  JsonWriter w;
  w.begin_object().field("ok", true).field("draining", true).field("streams_open", streams_open).end_object();
  return w.take();
}

std::string render_undrain_json() {
  JsonWriter w;
  w.begin_object().field("ok", true).field("draining", false).end_object();
  return w.take();
}

std::string render_error_json(std::string_view message) {
  JsonWriter w;
  w.begin_object().field("error", message).end_object();
  return w.take();
}

}  // namespace rdmagw::admin
