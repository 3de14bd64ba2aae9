// SPDX-License-Identifier: Apache-2.0
#include "proxy/admin/metric_totals.h"

#include <map>

#include "common/buffer_pool.h"

namespace rdmagw::admin {
namespace {

void add_histogram(const metrics::Histogram& h, HistogramTotals* totals) {
  for (size_t i = 0; i < totals->buckets.size(); ++i) {
    uint64_t n = h.bucket(i);
    totals->buckets[i] += n;
    totals->count += n;
  }
  totals->sum_us += h.sum_us();
}

// Orders entries: configured names in configuration order, then the rest
// in name order (std::map iteration).
template <typename Totals>
std::vector<Totals> configured_first(const std::vector<std::string>& configured_names,
                                     std::map<std::string, Totals>* by_name) {
  std::vector<Totals> out;
  out.reserve(by_name->size());
  for (const auto& name : configured_names) {
    auto it = by_name->find(name);
    if (it == by_name->end()) continue;
    out.push_back(std::move(it->second));
    by_name->erase(it);
  }
  for (auto& [name, totals] : *by_name) out.push_back(std::move(totals));
  return out;
}

}  // namespace

int64_t MetricTotals::streams_active() const {
  int64_t active = target_streams_active;
  for (const auto& l : listeners) active += l.active;
  return active;
}

std::string listen_address_text(const ListenerConfig& listener) {
  std::string text = listener.listen.to_string();
  // A transparent listener's address parses into a TCP endpoint; the
  // configuration writes it with its own scheme.
  constexpr std::string_view kTcp = "tcp:";
  if (listener.transparent && text.starts_with(kTcp)) text = "transparent:" + text.substr(kTcp.size());
  return text;
}

MetricTotals sum_metrics(const Config* config, const std::vector<const metrics::WorkerMetrics*>& workers) {
  MetricTotals totals;
  std::map<std::string, ListenerTotals> listeners;
  std::map<std::string, PeerTotals> peers;
  std::vector<std::string> configured_listeners, configured_peers;
  if (config) {
    for (const auto& l : config->listeners) {
      ListenerTotals& t = listeners[l.name];
      t.name = l.name;
      t.listen = listen_address_text(l);
      t.configured = true;
      configured_listeners.push_back(l.name);
    }
    for (const auto& p : config->peers) {
      peers[p.name].name = p.name;
      configured_peers.push_back(p.name);
    }
  }

  for (size_t index = 0; index < workers.size(); ++index) {
    const metrics::WorkerMetrics* w = workers[index];
    if (!w) continue;
    WorkerTotals& mine = totals.workers.emplace_back();
    mine.worker = static_cast<unsigned>(index);
    mine.streams_active = w->target_streams_active.value();
    mine.buffer_bytes_in_use = w->buffer_bytes_in_use.value();
    mine.buffer_bytes_posted = w->buffer_bytes_posted.value();
    mine.buffer_bytes_resident = BufferPool::resident_bytes(w->buffer_slab_base(), w->buffer_slab_bytes());
    totals.streams_opened_outbound += w->streams_opened_outbound.value();
    totals.streams_opened_inbound += w->streams_opened_inbound.value();
    totals.target_streams_active += w->target_streams_active.value();
    for (size_t i = 0; i < totals.streams_failed.size(); ++i) totals.streams_failed[i] += w->streams_failed[i].value();
    totals.rdma_send_completions += w->rdma_send_completions.value();
    totals.rdma_recv_completions += w->rdma_recv_completions.value();
    for (size_t from = 0; from < metrics::kTransportKinds; ++from) {
      for (size_t to = 0; to < metrics::kTransportKinds; ++to)
        totals.session_resumes[from][to] += w->session_resumes[from][to].value();
      for (size_t loss = 0; loss < totals.transport_losses[from].size(); ++loss)
        totals.transport_losses[from][loss] += w->transport_losses[from][loss].value();
    }
    totals.stream_resume_failures += w->stream_resume_failures.value();
    for (size_t i = 0; i < totals.auth_failures.size(); ++i) totals.auth_failures[i] += w->auth_failures[i].value();
    totals.handshakes_refused += w->handshakes_refused.value();
    totals.sessions_idle_closed += w->sessions_idle_closed.value();
    totals.sessions_evicted += w->sessions_evicted.value();
    totals.sessions_refused += w->sessions_refused.value();
    totals.address_sessions_closed += w->address_sessions_closed.value();
    totals.sessions_revoked += w->sessions_revoked.value();
    totals.address_sessions_refused += w->address_sessions_refused.value();
    totals.streams_handed_over += w->streams_handed_over.value();
    totals.rdma_budget_evicted += w->rdma_budget_evicted.value();
    totals.rdma_budget_tcp += w->rdma_budget_tcp.value();
    totals.rdma_budget_refused += w->rdma_budget_refused.value();
    totals.rdma_budget_rejected += w->rdma_budget_rejected.value();
    totals.access_log_lines += w->access_log_lines.value();
    totals.access_log_suppressed += w->access_log_suppressed.value();
    totals.resent_bytes += w->resent_bytes.value();
    add_histogram(w->stream_open, &totals.stream_open);
    add_histogram(w->target_connect, &totals.target_connect);
    add_histogram(w->session_rtt, &totals.session_rtt);

    w->for_each_listener([&](const std::string& name, const metrics::ListenerMetrics& m) {
      ListenerTotals& t = listeners[name];
      t.name = name;
      t.accepted += m.accepted.value();
      t.active += m.active.value();
      t.bytes_received += m.bytes_received.value();
      t.bytes_sent += m.bytes_sent.value();
      t.refused_max_connections += m.refused_max_connections.value();
      t.refused_accept_rate += m.refused_accept_rate.value();
      t.idle_closed += m.idle_closed.value();
      mine.streams_active += m.active.value();
    });
    w->for_each_peer([&](const std::string& name, const metrics::PeerMetrics& m) {
      PeerTotals& t = peers[name];
      t.name = name;
      t.bytes_sent += m.bytes_sent.value();
      t.bytes_received += m.bytes_received.value();
      t.bytes_queued += m.bytes_queued.value();
      t.streams_opened += m.streams_opened.value();
      t.credit_stalls += m.credit_stalls.value();
      t.reconnects += m.reconnects.value();
      t.sessions_tcp += m.sessions_tcp.value();
      t.sessions_rdma += m.sessions_rdma.value();
      t.rtt_us = std::max(t.rtt_us, m.rtt_us.value());
      mine.sessions_tcp += m.sessions_tcp.value();
      mine.sessions_rdma += m.sessions_rdma.value();
      mine.bytes_sent += m.bytes_sent.value();
      mine.bytes_received += m.bytes_received.value();
    });
  }

  totals.listeners = configured_first(configured_listeners, &listeners);
  totals.peers = configured_first(configured_peers, &peers);
  return totals;
}

}  // namespace rdmagw::admin
