// SPDX-License-Identifier: Apache-2.0
#include "proxy/transport/rdma/connect_params.h"

#include "common/protocol_limits.h"
#include "proxy/transport/rdma/rdma_transport.h"

namespace rdmagw::transport {

namespace {
constexpr uint32_t kMagic = 0x31574752;  // "RGW1"
constexpr uint32_t kFlagSession = 1;
}  // namespace

size_t encode_connect_params(uint8_t* out, const ConnectParams& params) {
  tunnel::put_u32(out, kMagic);
  tunnel::put_u32(out + 4, params.recv_depth);
  tunnel::put_u32(out + 8, params.buffer_size);
  if (!params.session) return kConnectParamsSize;
  tunnel::put_u32(out + 12, kFlagSession);
  tunnel::put_u64(out + 16, params.session->instance);
  tunnel::put_u64(out + 24, params.session->nonce);
  return kConnectParamsMaxSize;
}

bool decode_connect_params(const void* data, size_t len, ConnectParams* out, const char** reason) {
  auto* p = static_cast<const uint8_t*>(data);
  if (!p || len < kConnectParamsSize || tunnel::get_u32(p) != kMagic) {
    *reason = "no rdmagw parameters";
    return false;
  }
  out->recv_depth = tunnel::get_u32(p + 4);
  out->buffer_size = tunnel::get_u32(p + 8);
  if (out->recv_depth < kRdmaRecvDepthMin || out->recv_depth > kRdmaRecvDepthMax) {
    *reason = "recv_depth outside the transport's limits";
    return false;
  }
  if (out->buffer_size < kMaxDataMin + kRdmaHeaderSize) {
    *reason = "buffer_size below the transport's minimum";
    return false;
  }
  out->session.reset();
  if (len >= kConnectParamsMaxSize && (tunnel::get_u32(p + 12) & kFlagSession))
    out->session = tunnel::SessionToken{tunnel::get_u64(p + 16), tunnel::get_u64(p + 24)};
  return true;
}

}  // namespace rdmagw::transport
