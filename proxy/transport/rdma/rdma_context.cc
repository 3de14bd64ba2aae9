// SPDX-License-Identifier: Apache-2.0
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

namespace {
void free_device(RdmaDeviceState& d) {
  if (d.mr) ibv_dereg_mr(d.mr);
  if (d.pd) ibv_dealloc_pd(d.pd);
  d.mr = nullptr;
  d.pd = nullptr;
}
}  // namespace

RdmaContext::~RdmaContext() {
  // Sessions (and their QPs) are gone by now: the worker closes them first.
  for (auto& d : devices_) free_device(*d);
}

void RdmaContext::release(RdmaDeviceState* device) {
  if (!device || device->users == 0 || --device->users > 0) return;
  // Unused: freed, so that nothing of this process holds a device that
  // goes away (the kernel waits for every user before it lets go). The
  // next transport registers the slab again; sessions are long-lived, so
  // that is rare.
  bool removed = device->removed;
  free_device(*device);
  std::erase_if(devices_, [&](const auto& d) { return d.get() == device; });
  if (removed) forget_removed_devices();
}

void RdmaContext::device_removed(RdmaDeviceState* device) {
  if (device) device->removed = true;
}

RdmaDeviceState* RdmaContext::device(ibv_context* context, std::string* error) {
  for (auto& d : devices_) {
    if (d->context == context && !d->removed) {
      ++d->users;
      return d.get();
    }
  }
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
    *error = "ibv_reg_mr of " + std::to_string(pool_.slab_bytes() >> 20) + " MiB (tunnel.rdma.slab_size) on " + d.name +
             ": " + strerror(errno) + " (raise ulimit -l / memlock)";
    ibv_dealloc_pd(d.pd);
    return nullptr;
  }
  d.users = 1;
  devices_.push_back(std::make_unique<RdmaDeviceState>(d));
  return devices_.back().get();
}

void forget_removed_devices() {
  // rdma_get_devices() syncs librdmacm's list: a device no longer there is
  // closed at once if unused, else when its last cm_id goes.
  if (ibv_context** list = rdma_get_devices(nullptr)) rdma_free_devices(list);
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
