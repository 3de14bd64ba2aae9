// SPDX-License-Identifier: Apache-2.0
#pragma once
// What rdmagw asks of an RDMA device, kept in one pure function so that a
// unit test can prove it stays within eRDMA's limits on machines without a
// device: RC queue pairs only, no SRQ, one receive SGE, at most 6 send SGEs,
// at most 96 bytes inline, at most 8192 send work requests.
#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "config/config.h"

namespace rdmagw::transport {

// eRDMA's limits (rdma-core providers/erdma, kernel drivers/infiniband/hw/erdma).
inline constexpr uint32_t kErdmaMaxSendSge = 6;
inline constexpr uint32_t kErdmaMaxRecvSge = 1;
inline constexpr uint32_t kErdmaMaxInline = 96;
inline constexpr uint32_t kErdmaMaxSendWr = 8192;

// Device limits that matter to us (from ibv_query_device), so tests can
// pass made-up ones.
struct DeviceLimits {
  uint32_t max_qp_wr = kErdmaMaxSendWr;
  uint32_t max_sge = kErdmaMaxSendSge;
  uint32_t max_cqe = 1u << 20;
};

// Builds the QP request for a session. Never asks for more than eRDMA or the
// device allows; returns false with *error naming the config key and the
// limit when the configuration cannot fit the device.
bool make_qp_init_attr(const RdmaConfig& config, const DeviceLimits& device, ibv_cq* cq, ibv_qp_init_attr* out,
                       std::string* error);

}  // namespace rdmagw::transport
