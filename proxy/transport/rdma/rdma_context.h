// SPDX-License-Identifier: Apache-2.0
#pragma once
// Per-worker RDMA state: for each device a session lands on, one protection
// domain and one memory region covering the worker's whole buffer slab, so
// every slab buffer can be posted as-is (no copy into a staging area).
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <atomic>
#include <memory>
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
  uint32_t users = 0;    // transports with resources on it (QP, CQ)
  bool removed = false;  // RDMA_CM_EVENT_DEVICE_REMOVAL seen: no new user
};

class RdmaContext {
 public:
  RdmaContext(BufferPool& pool, const RdmaConfig& config, metrics::WorkerMetrics* metrics = nullptr)
      : pool_(pool), config_(config), metrics_(metrics) {}
  ~RdmaContext();
  RdmaContext(const RdmaContext&) = delete;
  RdmaContext& operator=(const RdmaContext&) = delete;

  // PD + MR for the device behind `context`, created on first use, counted
  // as used until release(). Returns nullptr with *error set when
  // registration fails (e.g. memlock limit).
  RdmaDeviceState* device(ibv_context* context, std::string* error);
  // A transport freed what it had on `device` (its QP and CQ). The PD and
  // MR are freed with the last user.
  void release(RdmaDeviceState* device);
  // The device is going away (RDMA_CM_EVENT_DEVICE_REMOVAL): no new
  // transport uses it (the same device added again gets fresh state).
  void device_removed(RdmaDeviceState* device);
  BufferPool& pool() { return pool_; }
  const RdmaConfig& config() const { return config_; }
  metrics::WorkerMetrics* metrics() const { return metrics_; }

  // RDMA transports of this worker alive now (dialling, accepting, open or
  // closing: each posts, or will post, recv_depth receives from the slab),
  // and how many tunnel.rdma.max_pinned allows.
  // Atomic: worker 0 reads the others' when it places connect requests.
  size_t transports() const { return transports_.load(std::memory_order_relaxed); }
  size_t transport_limit() const {
    // At least one: the parser checked max_pinned against a stride not yet
    // rounded up to the pool's 64 bytes.
    return std::max<size_t>(1, config_.session_limit(pool_.buffer_size()));
  }
  bool at_transport_limit() const { return transports() >= transport_limit(); }
  void transport_added() { transports_.fetch_add(1, std::memory_order_relaxed); }
  void transport_removed() { transports_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  BufferPool& pool_;
  RdmaConfig config_;
  metrics::WorkerMetrics* metrics_;
  std::atomic<size_t> transports_{0};
  // Stable addresses: transports hold pointers.
  std::vector<std::unique_ptr<RdmaDeviceState>> devices_;
};

// librdmacm keeps a device open (its verbs context) until it sees the device
// gone from the device list, which it looks at only now and then; the kernel
// waits for that before it lets a removed device go. This makes it look now:
// once nothing of ours is left on a removed device, librdmacm closes it.
void forget_removed_devices();

// Startup check for `transport: auto | rdma`: is there a usable device, and
// can `workers` slabs of tunnel.rdma.slab_size be locked in memory? Returns
// an empty string when RDMA can be used, else the reason it cannot.
std::string rdma_unavailable_reason(const RdmaConfig& config, unsigned workers);

// With a device present: does the configuration fit its limits (queue
// depths, completion queue size, send SGEs)? Empty, or an error naming the
// key and the device's limit.
std::string rdma_config_error(const RdmaConfig& config);

}  // namespace rdmagw::transport
