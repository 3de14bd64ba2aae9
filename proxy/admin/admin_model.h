// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the admin endpoint reports, as plain structs: the runtime fills them
// (workers answer through their mailboxes, counters are read directly) and
// the admin thread renders them as JSON or Prometheus text. The schemas are
// in docs/admin.md.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/metrics.h"
#include "config/config.h"
#include "config/services_file.h"
#include "proxy/admin/process_self.h"
#include "proxy/local/stream_info.h"
#include "proxy/tunnel/tunnel_info.h"

namespace rdmagw::admin {

// Filled in by the data path (tunnel and local layers), which never include
// anything of admin/: these are their plain description structs.
using SessionInfo = tunnel::SessionInfo;
using PeerInfo = tunnel::PeerInfo;
using StreamInfo = local::StreamInfo;

struct ReloadResult {
  bool ok = false;
  uint64_t generation = 0;           // the config generation this reload made (ok only)
  std::vector<std::string> errors;   // "FILE:LINE:COL: key: message", or a plain reason
  std::vector<std::string> changes;  // "listener redis added", "peer b removed", ...
};

// The services file as this process has it (docs/kubernetes.md).
struct ServicesStatus {
  std::string file;            // services.file; empty: not configured
  bool loaded = false;         // a table is in use
  std::string table_file;      // the file it was read from (after a reload moved services.file: the old one)
  double loaded_unix = 0;      // when the table in use was read
  std::string error;           // why the last read failed; empty if it did not
  uint64_t loads = 0;          // good reads
  uint64_t load_failures = 0;  // failed reads
  // From the table in use: whether its writer reached the API server.
  ServiceTable::Api api;
  size_t services = 0;
  size_t endpoints = 0;
};

// The tunnel to an endpoint's rdmagw, as this process has it: the best
// state any worker's link to it is in.
struct EndpointTunnel {
  std::string state;  // up | resuming | connecting | down | idle (tunnel::PeerLink::state_name)
  std::string error;  // the last dial's failure, while down
};

// GET /services: the table in use and each endpoint's open connections.
struct ServicesReport {
  ServicesStatus status;
  std::string direct;                                                  // services.direct
  std::shared_ptr<const ServiceTable> table;                           // null: none loaded
  std::unordered_map<AddressPort, uint64_t, AddressPortHash> streams;  // by ServiceTable::key, over workers
  // By the address of the rdmagw that carries an endpoint (its own or its
  // node's; port 0): those some worker has a link to; the others are "idle".
  std::unordered_map<AddressPort, EndpointTunnel, AddressPortHash> tunnels;
};

// local_legs.redirect (docs/architecture.md, "Local legs past TCP").
struct LocalLegsStatus {
  std::string state = "off";  // off | redirected | unavailable (then on TCP, as off)
  std::string reason;         // unavailable: why
  std::string cgroup;
  uint64_t max_in_flight = 0;
  local::LocalRedirectStats counters;  // redirected: what passed which way
};

struct Status {
  std::string version;
  std::string commit;  // built from (common/version.h)
  std::string node;
  std::string config_file;
  uint64_t config_generation = 0;  // 1 at start, +1 per applied reload
  double uptime_seconds = 0;
  bool ready = false;
  std::string not_ready_reason;  // when !ready
  bool draining = false;
  unsigned workers = 0;
  std::string transport;  // "tcp" | "rdma" | "rdma,tcp"
  std::string transport_reason;
  std::string io_uring;         // features in use
  ReloadResult last_reload;     // empty errors/changes before the first
  double last_reload_unix = 0;  // 0: never
  ServicesStatus services;
  LocalLegsStatus local_legs;
  std::optional<ProcessSelf> self;  // /metrics only: the process_* metrics
};

// The runtime, as the admin thread sees it. Every call is made from the
// admin thread and may block briefly (workers answer within a loop turn).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual Status status() = 0;
  virtual std::shared_ptr<const Config> config() = 0;
  // One entry per worker, for the admin thread to read (see metrics.h).
  virtual std::vector<const metrics::WorkerMetrics*> worker_metrics() = 0;
  virtual const metrics::ProcessMetrics& process_metrics() = 0;
  // False with *error set when a worker did not answer in time.
  virtual bool peers(std::vector<PeerInfo>* out, std::string* error) = 0;
  virtual bool streams(std::vector<StreamInfo>* out, std::string* error) = 0;
  virtual bool services(ServicesReport* out, std::string* error) = 0;
  virtual ReloadResult reload() = 0;
  // Stop accepting, tell peers, let open streams finish; the process stays
  // up (not ready) until SIGTERM. Returns the streams still open.
  virtual uint64_t drain() = 0;
  // Undo drain(): listen and accept again, dial peers again. False with
  // *error (nothing changed) while starting, during a stop by signal, or
  // when a listening address cannot be bound again.
  virtual bool undrain(std::string* error) = 0;
};

}  // namespace rdmagw::admin
