// SPDX-License-Identifier: Apache-2.0
// RDMA CM private data (proxy/transport/rdma/connect_params.h): what any
// host that reaches the RDMA CM port sends with its connect request. What
// decodes must encode back to the same parameters.
#include <cstddef>
#include <cstdint>

#include "proxy/transport/rdma/connect_params.h"

using namespace rdmagw::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ConnectParams params;
  const char* reason = "";
  if (!decode_connect_params(data, size, &params, &reason)) return 0;
  uint8_t out[kConnectParamsMaxSize];
  size_t len = encode_connect_params(out, params);
  ConnectParams again;
  if (!decode_connect_params(out, len, &again, &reason)) __builtin_trap();
  if (again.recv_depth != params.recv_depth || again.buffer_size != params.buffer_size ||
      again.session.has_value() != params.session.has_value() ||
      (again.session && !(*again.session == *params.session)))
    __builtin_trap();
  return 0;
}
