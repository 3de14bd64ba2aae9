// SPDX-License-Identifier: Apache-2.0
#include "proxy/transport/rdma/rdma_limits.h"

#include <algorithm>
#include <cstring>

namespace rdmagw::transport {

bool make_qp_init_attr(const RdmaConfig& config, const DeviceLimits& device, ibv_cq* cq, ibv_qp_init_attr* out,
                       std::string* error) {
  uint32_t max_wr = std::min(device.max_qp_wr, kErdmaMaxSendWr);
  if (config.send_depth > max_wr) {
    *error = "tunnel.rdma.send_depth " + std::to_string(config.send_depth) + " exceeds the device limit of " +
             std::to_string(max_wr) + " work requests";
    return false;
  }
  if (config.recv_depth > device.max_qp_wr) {
    *error = "tunnel.rdma.recv_depth " + std::to_string(config.recv_depth) + " exceeds the device limit of " +
             std::to_string(device.max_qp_wr) + " work requests";
    return false;
  }
  if (static_cast<uint64_t>(config.send_depth) + config.recv_depth > device.max_cqe) {
    *error = "tunnel.rdma.send_depth + recv_depth (" + std::to_string(config.send_depth + config.recv_depth) +
             ") exceeds the device's completion queue limit of " + std::to_string(device.max_cqe);
    return false;
  }
  std::memset(out, 0, sizeof(*out));
  out->send_cq = cq;
  out->recv_cq = cq;
  out->srq = nullptr;         // eRDMA has no SRQ
  out->qp_type = IBV_QPT_RC;  // eRDMA has RC only
  out->sq_sig_all = 1;
  out->cap.max_send_wr = config.send_depth;
  out->cap.max_recv_wr = config.recv_depth;
  out->cap.max_send_sge = std::min({kErdmaMaxSendSge, device.max_sge});
  out->cap.max_recv_sge = kErdmaMaxRecvSge;
  out->cap.max_inline_data = std::min(config.inline_threshold, kErdmaMaxInline);
  return true;
}

}  // namespace rdmagw::transport
