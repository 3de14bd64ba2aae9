// SPDX-License-Identifier: Apache-2.0
#pragma once
// The admin endpoint's answers as text, from the plain structs of
// admin_model.h. Pure functions: no I/O, no clock, no locks beyond the ones
// WorkerMetrics takes to walk its maps, so tests call them directly. Field
// names and order follow docs/admin.md.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics.h"
#include "config/config.h"
#include "proxy/admin/admin_model.h"

namespace rdmagw::admin {

using WorkerMetricsList = std::vector<const metrics::WorkerMetrics*>;

// GET /stats. `config` (may be null) names the listeners and their listen
// addresses; counters are summed over `workers`.
std::string render_stats_json(const Status& status, const Config* config, const WorkerMetricsList& workers,
                              const metrics::ProcessMetrics& process);

// GET /metrics, Prometheus text format 0.0.4.
std::string render_metrics_text(const Status& status, const Config* config, const WorkerMetricsList& workers,
                                const metrics::ProcessMetrics& process);

// GET /services: the status of /stats's "services", then "table": each
// Service with its ports and endpoints, and each endpoint's open connections.
std::string render_services_json(const ServicesReport& report);

// GET /peers.
std::string render_peers_json(const std::vector<PeerInfo>& peers);

// GET /streams: `streams` is every active stream (oldest first); the answer
// carries streams[offset, offset + limit) and "total" = streams.size(). An
// offset past the end gives an empty page, not an error.
std::string render_streams_json(const std::vector<StreamInfo>& streams, size_t offset, size_t limit);

// GET /config: the configuration in the YAML schema of
// docs/configuration.md, every default filled in, plus "generation".
std::string render_config_json(const Config& config, uint64_t generation);

// POST /reload: {"ok": true, "generation": N, "changes": [...]} or
// {"ok": false, "errors": [...]}.
std::string render_reload_json(const ReloadResult& result, uint64_t generation);

// POST /drain: {"ok": true, "draining": true, "streams_open": N}.
std::string render_drain_json(uint64_t streams_open);
// POST /undrain: {"ok": true, "draining": false}.
std::string render_undrain_json();

// Any JSON endpoint that cannot answer: {"error": "..."}.
std::string render_error_json(std::string_view message);

}  // namespace rdmagw::admin
