// SPDX-License-Identifier: Apache-2.0
// GET /metrics: Prometheus text exposition format 0.0.4. Every family of the
// table in docs/admin.md is always present with its HELP and TYPE lines,
// even while it has no series yet, so dashboards and alerts can tell "no
// traffic" from "not exported".
#include <cstdio>
#include <initializer_list>

#include "common/utf8.h"
#include "proxy/admin/admin_render.h"
#include "proxy/admin/metric_totals.h"

namespace rdmagw::admin {
namespace {

// A measured quantity (CPU seconds, a start time), to the millisecond.
std::string decimal_text(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.3f", value);
  return text;
}

struct Label {
  std::string_view name;
  std::string_view value;
};

// Microseconds as an exact decimal number of seconds ("0.00005", "2.5",
// "10"): bucket bounds must print the same on every scrape, and going
// through a double could print 0.00005 as 5.0000000000000002e-05.
std::string seconds_text(uint64_t us) {
  std::string text = std::to_string(us / 1'000'000);
  uint64_t fraction = us % 1'000'000;
  if (fraction == 0) return text;
  std::string digits = std::to_string(fraction);
  digits.insert(0, 6 - digits.size(), '0');
  digits.erase(digits.find_last_not_of('0') + 1);
  return text + "." + digits;
}

class PrometheusWriter {
 public:
  // Starts a family: its HELP and TYPE lines, which the format allows once.
  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_.append("# HELP ").append(name).push_back(' ');
    append_escaped(help, /*in_label_value=*/false);
    out_.append("\n# TYPE ").append(name).push_back(' ');
    out_.append(type).push_back('\n');
  }

  void sample(std::string_view name, std::initializer_list<Label> labels, std::string_view value) {
    out_.append(name);
    if (labels.size() > 0) {
      out_.push_back('{');
      bool first = true;
      for (const Label& label : labels) {
        if (!first) out_.push_back(',');
        first = false;
        out_.append(label.name).append("=\"");
        append_escaped(label.value, /*in_label_value=*/true);
        out_.push_back('"');
      }
      out_.push_back('}');
    }
    out_.push_back(' ');
    out_.append(value).push_back('\n');
  }
  void sample(std::string_view name, std::initializer_list<Label> labels, uint64_t value) {
    sample(name, labels, std::to_string(value));
  }
  void sample(std::string_view name, std::initializer_list<Label> labels, int64_t value) {
    sample(name, labels, std::to_string(value));
  }

  void histogram(const std::string& name, std::string_view help, const HistogramTotals& h) {
    family(name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < metrics::kLatencyBucketsUs.size(); ++i) {
      cumulative += h.buckets[i];
      sample(name + "_bucket", {{"le", seconds_text(metrics::kLatencyBucketsUs[i])}}, cumulative);
    }
    cumulative += h.buckets.back();  // the overflow bucket: now equal to h.count
    sample(name + "_bucket", {{"le", "+Inf"}}, cumulative);
    sample(name + "_sum", {}, seconds_text(h.sum_us));
    sample(name + "_count", {}, h.count);
  }

  std::string take() { return std::move(out_); }

 private:
  // HELP text escapes backslash and newline; label values also escape the
  // double quote. Both must be UTF-8, and label values (peer node names)
  // come from the network, so invalid bytes become U+FFFD.
  void append_escaped(std::string_view text, bool in_label_value) {
    for (size_t i = 0; i < text.size();) {
      const char c = text[i];
      if (static_cast<unsigned char>(c) >= 0x80) {
        size_t length = utf8_sequence_length(text, i);
        out_.append(length ? text.substr(i, length) : kReplacementCharacter);
        i += length ? length : 1;
        continue;
      }
      if (c == '\\') {
        out_.append("\\\\");
      } else if (c == '\n') {
        out_.append("\\n");
      } else if (c == '"' && in_label_value) {
        out_.append("\\\"");
      } else {
        out_.push_back(c);
      }
      i += 1;
    }
  }

  std::string out_;
};

void write_listener_families(PrometheusWriter& p, const MetricTotals& totals) {
  p.family("rdmagw_connections_accepted_total", "counter", "Connections accepted by a listener.");
  for (const auto& l : totals.listeners)
    p.sample("rdmagw_connections_accepted_total", {{"listener", l.name}}, l.accepted);
  p.family("rdmagw_connections_active", "gauge", "Connections open now on a listener.");
  for (const auto& l : totals.listeners) p.sample("rdmagw_connections_active", {{"listener", l.name}}, l.active);
  p.family("rdmagw_listener_received_bytes_total", "counter",
           "Bytes a listener's applications sent, carried into the tunnel.");
  for (const auto& l : totals.listeners)
    p.sample("rdmagw_listener_received_bytes_total", {{"listener", l.name}}, l.bytes_received);
  p.family("rdmagw_listener_sent_bytes_total", "counter",
           "Bytes sent to a listener's applications, out of the tunnel.");
  for (const auto& l : totals.listeners)
    p.sample("rdmagw_listener_sent_bytes_total", {{"listener", l.name}}, l.bytes_sent);
  p.family("rdmagw_listener_refused_total", "counter",
           "Connections reset at accept by a listener's limit (max_connections, accepts_per_second).");
  for (const auto& l : totals.listeners) {
    p.sample("rdmagw_listener_refused_total", {{"listener", l.name}, {"limit", "max_connections"}},
             l.refused_max_connections);
    p.sample("rdmagw_listener_refused_total", {{"listener", l.name}, {"limit", "accepts_per_second"}},
             l.refused_accept_rate);
  }
  p.family("rdmagw_listener_idle_closed_total", "counter",
           "Connections a listener's idle_timeout_ms ended (reset both ways).");
  for (const auto& l : totals.listeners)
    p.sample("rdmagw_listener_idle_closed_total", {{"listener", l.name}}, l.idle_closed);
}

void write_stream_families(PrometheusWriter& p, const MetricTotals& totals) {
  p.family("rdmagw_streams_opened_total", "counter",
           "Streams opened: outbound for applications here, inbound for peers.");
  p.sample("rdmagw_streams_opened_total", {{"direction", "outbound"}}, totals.streams_opened_outbound);
  p.sample("rdmagw_streams_opened_total", {{"direction", "inbound"}}, totals.streams_opened_inbound);
  p.family("rdmagw_streams_failed_total", "counter", "Streams that failed, by reason.");
  for (size_t i = 0; i < totals.streams_failed.size(); ++i) {
    auto reason = metrics::stream_failure_name(static_cast<metrics::StreamFailure>(i));
    p.sample("rdmagw_streams_failed_total", {{"reason", reason}}, totals.streams_failed[i]);
  }
}

// metrics.peer_series: at most `limit` peers keep series of their own, the
// busiest first among those not yet placed; every other peer (and those a
// worker already counted together) is summed as peer="(other)", listed
// last. Where each peer went is remembered (`memory`), so that no peer's
// total moves out of (other) again.
std::vector<PeerTotals> capped_peers(const std::vector<PeerTotals>& peers, uint32_t limit,
                                     metrics::PeerSeriesMemory& memory) {
  std::vector<const PeerTotals*> named;
  for (const auto& p : peers)
    if (p.name != metrics::WorkerMetrics::kOtherPeers) named.push_back(&p);
  std::stable_sort(named.begin(), named.end(), [](const PeerTotals* a, const PeerTotals* b) {
    return a->bytes_sent + a->bytes_received > b->bytes_sent + b->bytes_received;
  });
  std::lock_guard<std::mutex> lock(memory.mu);
  std::vector<const PeerTotals*> own;  // busiest first
  for (const PeerTotals* p : named)
    if (memory.own.count(p->name)) own.push_back(p);
  while (own.size() > limit) {  // a lowered limit: the least busy go to (other) for good
    memory.own.erase(own.back()->name);
    memory.folded.insert(own.back()->name);
    own.pop_back();
  }
  for (const PeerTotals* p : named) {
    if (memory.own.count(p->name) || memory.folded.count(p->name)) continue;
    if (memory.own.size() < limit) {
      memory.own.insert(p->name);
      own.push_back(p);
    } else {
      memory.folded.insert(p->name);
    }
  }
  PeerTotals other;
  other.name = std::string(metrics::WorkerMetrics::kOtherPeers);
  bool folded = false;
  auto fold = [&](const PeerTotals& p) {
    folded = true;
    other.bytes_sent += p.bytes_sent;
    other.bytes_received += p.bytes_received;
    other.bytes_queued += p.bytes_queued;
    other.streams_opened += p.streams_opened;
    other.credit_stalls += p.credit_stalls;
    other.reconnects += p.reconnects;
    other.sessions_tcp += p.sessions_tcp;
    other.sessions_rdma += p.sessions_rdma;
    other.rtt_us = std::max(other.rtt_us, p.rtt_us);
  };
  std::vector<PeerTotals> out;
  for (const PeerTotals& p : peers) {
    if (p.name != metrics::WorkerMetrics::kOtherPeers && memory.own.count(p.name))
      out.push_back(p);
    else
      fold(p);
  }
  std::sort(out.begin(), out.end(), [](const PeerTotals& a, const PeerTotals& b) { return a.name < b.name; });
  if (folded) out.push_back(std::move(other));
  return out;
}

void write_peer_families(PrometheusWriter& p, const MetricTotals& totals, uint32_t peer_series,
                         metrics::PeerSeriesMemory& memory) {
  const std::vector<PeerTotals> peers = capped_peers(totals.peers, peer_series, memory);
  p.family("rdmagw_peer_sent_bytes_total", "counter", "Stream payload bytes sent to a peer.");
  for (const auto& peer : peers) p.sample("rdmagw_peer_sent_bytes_total", {{"peer", peer.name}}, peer.bytes_sent);
  p.family("rdmagw_peer_received_bytes_total", "counter", "Stream payload bytes received from a peer.");
  for (const auto& peer : peers)
    p.sample("rdmagw_peer_received_bytes_total", {{"peer", peer.name}}, peer.bytes_received);
  p.family("rdmagw_peer_queued_bytes_total", "counter",
           "Of the bytes received from a peer, those the application's socket did not take on arrival, "
           "copied into the stream's queue.");
  for (const auto& peer : peers) p.sample("rdmagw_peer_queued_bytes_total", {{"peer", peer.name}}, peer.bytes_queued);
  p.family("rdmagw_sessions", "gauge", "Tunnel sessions open now, by peer and transport.");
  for (const auto& peer : peers) {
    p.sample("rdmagw_sessions", {{"peer", peer.name}, {"transport", "tcp"}}, peer.sessions_tcp);
    p.sample("rdmagw_sessions", {{"peer", peer.name}, {"transport", "rdma"}}, peer.sessions_rdma);
  }
  p.family("rdmagw_reconnects_total", "counter", "Sessions to a peer dialed after the first.");
  for (const auto& peer : peers) p.sample("rdmagw_reconnects_total", {{"peer", peer.name}}, peer.reconnects);
  p.family("rdmagw_credit_stalls_total", "counter", "Times a stream to a peer waited for session credit.");
  for (const auto& peer : peers) p.sample("rdmagw_credit_stalls_total", {{"peer", peer.name}}, peer.credit_stalls);
  p.family("rdmagw_peer_session_rtt_seconds", "gauge",
           "The last keepalive round trip of a session to a peer (the slowest worker's; for (other), the slowest "
           "peer's).");
  for (const auto& peer : peers)
    if (peer.rtt_us > 0)
      p.sample("rdmagw_peer_session_rtt_seconds", {{"peer", peer.name}},
               seconds_text(static_cast<uint64_t>(peer.rtt_us)));
}

void write_worker_families(PrometheusWriter& p, const MetricTotals& totals) {
  p.family("rdmagw_worker_sessions", "gauge", "Tunnel sessions open now on a worker (both roles), by transport.");
  for (const auto& w : totals.workers) {
    std::string index = std::to_string(w.worker);
    p.sample("rdmagw_worker_sessions", {{"worker", index}, {"transport", "tcp"}}, w.sessions_tcp);
    p.sample("rdmagw_worker_sessions", {{"worker", index}, {"transport", "rdma"}}, w.sessions_rdma);
  }
  p.family("rdmagw_worker_streams_active", "gauge", "Streams open now on a worker (client and target side).");
  for (const auto& w : totals.workers)
    p.sample("rdmagw_worker_streams_active", {{"worker", std::to_string(w.worker)}}, w.streams_active);
  p.family("rdmagw_worker_sent_bytes_total", "counter", "Stream payload bytes a worker sent to peers.");
  for (const auto& w : totals.workers)
    p.sample("rdmagw_worker_sent_bytes_total", {{"worker", std::to_string(w.worker)}}, w.bytes_sent);
  p.family("rdmagw_worker_received_bytes_total", "counter", "Stream payload bytes a worker received from peers.");
  for (const auto& w : totals.workers)
    p.sample("rdmagw_worker_received_bytes_total", {{"worker", std::to_string(w.worker)}}, w.bytes_received);
  p.family("rdmagw_worker_buffer_bytes", "gauge",
           "A worker's buffer pool: bytes of buffers holding bytes (in_use), lent to the kernel's receive ring "
           "(posted), and of its slab resident in memory.");
  for (const auto& w : totals.workers) {
    std::string index = std::to_string(w.worker);
    p.sample("rdmagw_worker_buffer_bytes", {{"worker", index}, {"state", "in_use"}}, w.buffer_bytes_in_use);
    p.sample("rdmagw_worker_buffer_bytes", {{"worker", index}, {"state", "posted"}}, w.buffer_bytes_posted);
    p.sample("rdmagw_worker_buffer_bytes", {{"worker", index}, {"state", "resident"}}, w.buffer_bytes_resident);
  }
}

void write_process_families(PrometheusWriter& p, const Status& status, const Config* config, const MetricTotals& totals,
                            const metrics::ProcessMetrics& process) {
  p.family("rdmagw_rdma_completions_total", "counter", "RDMA work completions, by kind.");
  p.sample("rdmagw_rdma_completions_total", {{"kind", "send"}}, totals.rdma_send_completions);
  p.sample("rdmagw_rdma_completions_total", {{"kind", "recv"}}, totals.rdma_recv_completions);
  p.family("rdmagw_session_resumes_total", "counter",
           "Tunnel sessions that resumed on a new transport, by the transport lost and the one resumed on "
           "(from rdma to tcp: auto fell back; from tcp to rdma: it moved back).");
  for (size_t from = 0; from < metrics::kTransportKinds; ++from)
    for (size_t to = 0; to < metrics::kTransportKinds; ++to)
      p.sample("rdmagw_session_resumes_total",
               {{"from", metrics::transport_index_name(from)}, {"to", metrics::transport_index_name(to)}},
               totals.session_resumes[from][to]);
  p.family("rdmagw_transport_failures_total", "counter",
           "Transports that tunnel sessions lost, by kind and why (the session then resumes on a new one, or "
           "ends).");
  for (size_t kind = 0; kind < metrics::kTransportKinds; ++kind)
    for (size_t loss = 0; loss < totals.transport_losses[kind].size(); ++loss)
      p.sample("rdmagw_transport_failures_total",
               {{"transport", metrics::transport_index_name(kind)},
                {"reason", metrics::transport_loss_name(static_cast<metrics::TransportLoss>(loss))}},
               totals.transport_losses[kind][loss]);
  p.family("rdmagw_stream_resume_failures_total", "counter",
           "Streams reset because their suspended session could not resume (timeout, peer gone or restarted).");
  p.sample("rdmagw_stream_resume_failures_total", {}, totals.stream_resume_failures);
  p.family("rdmagw_resent_bytes_total", "counter", "Session frame bytes sent again after a resume.");
  p.sample("rdmagw_resent_bytes_total", {}, totals.resent_bytes);
  p.family("rdmagw_auth_failures_total", "counter",
           "Tunnel handshakes that failed authentication, by reason: a peer without a valid key or certificate, "
           "one that refused ours, or settings the two sides disagree on.");
  for (size_t i = 0; i < totals.auth_failures.size(); ++i)
    p.sample("rdmagw_auth_failures_total", {{"reason", std::string(auth_failure_name(static_cast<AuthFailure>(i)))}},
             totals.auth_failures[i]);
  p.family("rdmagw_tunnel_handshakes_refused_total", "counter",
           "Tunnel connections refused at accept: too many in their handshake at once (tunnel.limits).");
  p.sample("rdmagw_tunnel_handshakes_refused_total", {}, totals.handshakes_refused);
  p.family("rdmagw_tunnel_sessions_idle_closed_total", "counter",
           "On-demand sessions closed after tunnel.session_idle_ms without streams.");
  p.sample("rdmagw_tunnel_sessions_idle_closed_total", {}, totals.sessions_idle_closed);
  p.family("rdmagw_tunnel_session_limit_total", "counter",
           "tunnel.max_sessions reached: an idle session closed to make room, or a new session refused (its "
           "streams reset).");
  p.sample("rdmagw_tunnel_session_limit_total", {{"action", "closed_idle"}}, totals.sessions_evicted);
  p.sample("rdmagw_tunnel_session_limit_total", {{"action", "refused"}}, totals.sessions_refused);
  p.family("rdmagw_tunnel_address_session_limit_total", "counter",
           "tunnel.limits.sessions_per_address reached by a new session from a peer's address: its oldest suspended "
           "session closed to make room, or the new one refused.");
  p.sample("rdmagw_tunnel_address_session_limit_total", {{"action", "closed_suspended"}},
           totals.address_sessions_closed);
  p.sample("rdmagw_tunnel_address_session_limit_total", {{"action", "refused"}}, totals.address_sessions_refused);
  p.family("rdmagw_tunnel_sessions_revoked_total", "counter",
           "Sessions ended because the peer's proof no longer held: a reload removed the key or the CA it "
           "authenticated with, or its certificate ended (event=session_revoked says which).");
  p.sample("rdmagw_tunnel_sessions_revoked_total", {}, totals.sessions_revoked);
  p.family("rdmagw_tunnel_streams_handed_over_total", "counter",
           "tunnel.sessions_per_peer: streams accepted by one worker and carried by another worker's session to "
           "the same peer.");
  p.sample("rdmagw_tunnel_streams_handed_over_total", {}, totals.streams_handed_over);
  p.family("rdmagw_tunnel_rdma_pinned_limit_total", "counter",
           "tunnel.rdma.max_pinned reached: an idle RDMA session closed to make room, a new session put on TCP "
           "instead (auto), a new session refused (rdma), or a peer's RDMA connect rejected.");
  p.sample("rdmagw_tunnel_rdma_pinned_limit_total", {{"action", "closed_idle"}}, totals.rdma_budget_evicted);
  p.sample("rdmagw_tunnel_rdma_pinned_limit_total", {{"action", "tcp_instead"}}, totals.rdma_budget_tcp);
  p.sample("rdmagw_tunnel_rdma_pinned_limit_total", {{"action", "refused"}}, totals.rdma_budget_refused);
  p.sample("rdmagw_tunnel_rdma_pinned_limit_total", {{"action", "rejected"}}, totals.rdma_budget_rejected);
  p.family("rdmagw_access_log_lines_total", "counter",
           "Access log lines: written, or left out past access_log.lines_per_second (per worker).");
  p.sample("rdmagw_access_log_lines_total", {{"result", "written"}}, totals.access_log_lines);
  p.sample("rdmagw_access_log_lines_total", {{"result", "suppressed"}}, totals.access_log_suppressed);
  p.family("rdmagw_certificate_expiry_seconds", "gauge",
           "tunnel.auth.mode cert: seconds until this node's certificate expires (negative: it has).");
  if (config && config->tunnel.auth.credentials)
    p.sample("rdmagw_certificate_expiry_seconds", {}, config->tunnel.auth.credentials->seconds_left());
  p.family("rdmagw_config_reloads_total", "counter", "Configuration reloads applied.");
  p.sample("rdmagw_config_reloads_total", {}, process.config_reloads.value());
  p.family("rdmagw_config_reload_failures_total", "counter",
           "Configuration reloads refused; the running one was kept.");
  p.sample("rdmagw_config_reload_failures_total", {}, process.config_reload_failures.value());
  p.family("rdmagw_config_generation", "gauge",
           "Generation of the configuration in effect: 1 at start, +1 per reload applied.");
  p.sample("rdmagw_config_generation", {}, status.config_generation);
  p.family("rdmagw_ready", "gauge", "1 when ready to serve (listeners bound, not draining), else 0.");
  p.sample("rdmagw_ready", {}, uint64_t{status.ready ? 1u : 0u});
  p.family("rdmagw_build_info", "gauge", "Always 1: the version and the commit this rdmagw was built from.");
  p.sample("rdmagw_build_info", {{"version", status.version}, {"commit", status.commit}}, uint64_t{1});
}

// The names and meanings every Prometheus client library gives them.
void write_standard_process_families(PrometheusWriter& p, const ProcessSelf& self) {
  p.family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
  p.sample("process_cpu_seconds_total", {}, decimal_text(self.cpu_seconds));
  p.family("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
  p.sample("process_start_time_seconds", {}, decimal_text(self.start_time_seconds));
  p.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  p.sample("process_resident_memory_bytes", {}, self.resident_bytes);
  p.family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
  p.sample("process_virtual_memory_bytes", {}, self.virtual_bytes);
  p.family("process_open_fds", "gauge", "Number of open file descriptors.");
  p.sample("process_open_fds", {}, self.open_fds);
  p.family("process_max_fds", "gauge", "Maximum number of open file descriptors.");
  p.sample("process_max_fds", {}, self.max_fds);
}

// local_legs.redirect: every family; counters only while redirected.
void write_local_legs_families(PrometheusWriter& p, const LocalLegsStatus& legs) {
  p.family("rdmagw_local_legs_redirected", "gauge",
           "1 when the loopback legs to and from applications go past the TCP stack (local_legs.redirect, loaded "
           "and attached), else 0.");
  p.sample("rdmagw_local_legs_redirected", {}, uint64_t{legs.state == "redirected" ? 1u : 0u});
  const bool on = legs.state == "redirected";
  const local::LocalRedirectStats& c = legs.counters;
  p.family("rdmagw_local_legs_bytes_total", "counter",
           "Bytes sent on the redirected legs' sockets (both ends): redirected past TCP, or by TCP (past the bound, "
           "keeping order, or not admitted).");
  if (on) {
    p.sample("rdmagw_local_legs_bytes_total", {{"path", "redirected"}}, c.bytes_redirected);
    p.sample("rdmagw_local_legs_bytes_total", {{"path", "tcp"}}, c.bytes_tcp);
  }
  p.family("rdmagw_local_legs_sockets_total", "counter",
           "Loopback sockets on rdmagw's ports put in the redirect map when established (result=added), or refused "
           "(full).");
  if (on) {
    p.sample("rdmagw_local_legs_sockets_total", {{"result", "added"}}, c.sockets_added);
    p.sample("rdmagw_local_legs_sockets_total", {{"result", "refused"}}, c.sockets_refused);
  }
  p.family("rdmagw_local_legs_flows_to_tcp_total", "counter",
           "Times a flow rdmagw reads reached local_legs.max_in_flight unread and went by TCP.");
  if (on) p.sample("rdmagw_local_legs_flows_to_tcp_total", {}, c.flows_to_tcp);
}

// services.file (docs/kubernetes.md): every family, samples only where
// they mean something (a file configured; a table in use).
void write_services_families(PrometheusWriter& p, const ServicesStatus& services) {
  const bool configured = !services.file.empty();
  const bool loaded = configured && services.loaded;
  p.family("rdmagw_services_file_loads_total", "counter",
           "Reads of services.file: ok (its table went into use), or failed (missing, unreadable or malformed; the "
           "last table stays in use).");
  if (configured) {
    p.sample("rdmagw_services_file_loads_total", {{"result", "ok"}}, services.loads);
    p.sample("rdmagw_services_file_loads_total", {{"result", "failed"}}, services.load_failures);
  }
  p.family("rdmagw_services_file_loaded", "gauge", "1 when a services table is in use, else 0.");
  if (configured) p.sample("rdmagw_services_file_loaded", {}, uint64_t{loaded ? 1u : 0u});
  p.family("rdmagw_services_api_reachable", "gauge",
           "1 when the node agent reached the Kubernetes API server as it wrote the table in use, else 0 (the "
           "table is then the last known state).");
  if (loaded) p.sample("rdmagw_services_api_reachable", {}, uint64_t{services.api.reachable ? 1u : 0u});
  p.family("rdmagw_services", "gauge", "Kubernetes Services in the table in use.");
  if (loaded) p.sample("rdmagw_services", {}, uint64_t{services.services});
  p.family("rdmagw_service_endpoints", "gauge", "Endpoints of those Services (every state).");
  if (loaded) p.sample("rdmagw_service_endpoints", {}, uint64_t{services.endpoints});
}

}  // namespace

std::string render_metrics_text(const Status& status, const Config* config, const WorkerMetricsList& workers,
                                const metrics::ProcessMetrics& process) {
  const MetricTotals totals = sum_metrics(config, workers);
  PrometheusWriter p;
  write_listener_families(p, totals);
  write_stream_families(p, totals);
  write_peer_families(p, totals, config ? config->metrics.peer_series : MetricsConfig{}.peer_series,
                      process.peer_series);
  write_worker_families(p, totals);
  write_process_families(p, status, config, totals, process);
  write_services_families(p, status.services);
  write_local_legs_families(p, status.local_legs);
  if (status.self) write_standard_process_families(p, *status.self);
  p.histogram("rdmagw_stream_open_seconds",
              "Time from accepting an application's connection to sending its OPEN, waiting for a session included.",
              totals.stream_open);
  p.histogram("rdmagw_target_connect_seconds", "Time from receiving an OPEN to the target connection being up.",
              totals.target_connect);
  p.histogram("rdmagw_session_rtt_seconds", "Keepalive round trip time of tunnel sessions.", totals.session_rtt);
  return p.take();
}

}  // namespace rdmagw::admin
