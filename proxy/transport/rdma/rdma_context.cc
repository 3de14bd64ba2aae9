#include "proxy/transport/rdma/rdma_context.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

namespace {
// With CAP_IPC_LOCK the kernel pins memory for RDMA regardless of
// RLIMIT_MEMLOCK, so the limit only matters without it.
bool has_cap_ipc_lock() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      unsigned long long caps = std::stoull(line.substr(7), nullptr, 16);
      return (caps >> 14) & 1;  // CAP_IPC_LOCK
    }
  }
  return false;
}
}  // namespace

namespace rdmagw::transport {

RdmaContext::~RdmaContext() {
  // Sessions (and their QPs) are gone by now: the worker closes them first.
  for (auto& d : devices_) {
    if (d.mr) ibv_dereg_mr(d.mr);
    if (d.pd) ibv_dealloc_pd(d.pd);
  }
}

RdmaDeviceState* RdmaContext::device(ibv_context* context, std::string* error) {
  for (auto& d : devices_)
    if (d.context == context) return &d;
  RdmaDeviceState d;
  d.context = context;
  d.name = ibv_get_device_name(context->device);
  ibv_device_attr attr{};
  if (ibv_query_device(context, &attr) == 0) {
    d.limits.max_qp_wr = static_cast<uint32_t>(attr.max_qp_wr);
    d.limits.max_sge = static_cast<uint32_t>(attr.max_sge);
    d.limits.max_cqe = static_cast<uint32_t>(attr.max_cqe);
  }
  d.pd = ibv_alloc_pd(context);
  if (!d.pd) {
    *error = "ibv_alloc_pd on " + d.name + ": " + strerror(errno);
    return nullptr;
  }
  // Registering pins the whole slab: this is where tunnel.rdma.slab_size and
  // the memlock limit meet.
  d.mr = ibv_reg_mr(d.pd, pool_.base(), pool_.slab_bytes(), IBV_ACCESS_LOCAL_WRITE);
  if (!d.mr) {
    *error = "ibv_reg_mr of " + std::to_string(pool_.slab_bytes() >> 20) + " MiB (tunnel.rdma.slab_size) on " +
             d.name + ": " + strerror(errno) + " (raise ulimit -l / memlock)";
    ibv_dealloc_pd(d.pd);
    return nullptr;
  }
  devices_.push_back(d);
  return &devices_.back();
}

std::string rdma_config_error(const RdmaConfig& config) {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  std::string error;
  for (int i = 0; list && i < count; ++i) {
    std::string name = ibv_get_device_name(list[i]);
    if (!config.device.empty() && name != config.device) continue;
    ibv_context* ctx = ibv_open_device(list[i]);
    if (!ctx) continue;
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) == 0) {
      DeviceLimits limits;
      limits.max_qp_wr = static_cast<uint32_t>(attr.max_qp_wr);
      limits.max_sge = static_cast<uint32_t>(attr.max_sge);
      limits.max_cqe = static_cast<uint32_t>(attr.max_cqe);
      ibv_qp_init_attr qp;
      if (!make_qp_init_attr(config, limits, nullptr, &qp, &error)) error += " (device " + name + ")";
    }
    ibv_close_device(ctx);
    if (!error.empty()) break;
  }
  if (list) ibv_free_device_list(list);
  return error;
}

std::string rdma_unavailable_reason(const RdmaConfig& config, unsigned workers) {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (!list || count == 0) {
    if (list) ibv_free_device_list(list);
    return "no RDMA device found (ibv_get_device_list)";
  }
  bool found = config.device.empty();
  std::string names;
  for (int i = 0; i < count; ++i) {
    std::string name = ibv_get_device_name(list[i]);
    names += (names.empty() ? "" : ", ") + name;
    if (name == config.device) found = true;
  }
  ibv_free_device_list(list);
  if (!found) return "tunnel.rdma.device '" + config.device + "' not found; devices here: " + names;
  rlimit rl{};
  if (!has_cap_ipc_lock() && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    uint64_t need = config.slab_size * workers;
    if (rl.rlim_cur < need) {
      return "memlock limit (ulimit -l) is " + std::to_string(rl.rlim_cur >> 10) + " KiB but " +
             std::to_string(workers) + " workers x tunnel.rdma.slab_size " + std::to_string(config.slab_size >> 20) +
             " MiB need " + std::to_string(need >> 10) + " KiB";
    }
  }
  return "";
}

}  // namespace rdmagw::transport
