#pragma once
// Per-worker RDMA state: for each device a session lands on, one protection
// domain and one memory region covering the worker's whole buffer slab, so
// every slab buffer can be posted as-is (no copy into a staging area).
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <string>
#include <vector>

#include "common/buffer_pool.h"
#include "common/metrics.h"
#include "config/config.h"
#include "proxy/transport/rdma/rdma_limits.h"

namespace rdmagw::transport {

struct RdmaDeviceState {
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  ibv_mr* mr = nullptr;
  DeviceLimits limits;
  std::string name;
};

class RdmaContext {
 public:
  RdmaContext(BufferPool& pool, const RdmaConfig& config, metrics::WorkerMetrics* metrics = nullptr)
      : pool_(pool), config_(config), metrics_(metrics) {}
  ~RdmaContext();
  RdmaContext(const RdmaContext&) = delete;
  RdmaContext& operator=(const RdmaContext&) = delete;

  // PD + MR for the device behind `context`, created on first use. Returns
  // nullptr with *error set when registration fails (e.g. memlock limit).
  RdmaDeviceState* device(ibv_context* context, std::string* error);
  BufferPool& pool() { return pool_; }
  const RdmaConfig& config() const { return config_; }
  metrics::WorkerMetrics* metrics() const { return metrics_; }

 private:
  BufferPool& pool_;
  RdmaConfig config_;
  metrics::WorkerMetrics* metrics_;
  std::vector<RdmaDeviceState> devices_;
};

// Startup check for `transport: auto | rdma`: is there a usable device, and
// can `workers` slabs of tunnel.rdma.slab_size be locked in memory? Returns
// an empty string when RDMA can be used, else the reason it cannot.
std::string rdma_unavailable_reason(const RdmaConfig& config, unsigned workers);

// With a device present: does the configuration fit its limits (queue
// depths, completion queue size, send SGEs)? Empty, or an error naming the
// key and the device's limit.
std::string rdma_config_error(const RdmaConfig& config);

}  // namespace rdmagw::transport
