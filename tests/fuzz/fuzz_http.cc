// SPDX-License-Identifier: Apache-2.0
// The admin endpoint's HTTP request parser (proxy/admin/http_request.h) on
// arbitrary bytes, as the server uses it: requests are parsed one after
// another from the input, each checked for access and routed.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/secret_keys.h"
#include "fixed_backend.h"
#include "proxy/admin/admin_access.h"
#include "proxy/admin/http_request.h"

using namespace rdmagw;
using namespace rdmagw::admin;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static FixedBackend backend;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i < 16 && !input.empty(); ++i) {
    HttpRequest request;
    HttpParse parsed = parse_http_request(input.substr(0, kMaxHeadBytes + kMaxBodyBytes), &request);
    if (parsed.status == HttpParse::Status::kNeedMore) {
      // Only an incomplete request within the limits may wait for more.
      if (input.size() > kMaxHeadBytes + kMaxBodyBytes) __builtin_trap();
      return 0;
    }
    if (parsed.status == HttpParse::Status::kError) {
      if (parsed.error_status < 400 || parsed.error_status > 599) __builtin_trap();
      return 0;
    }
    if (parsed.consumed == 0 || parsed.consumed > input.size()) __builtin_trap();
    AccessDecision access = check_access(
        AccessRequest{request.path, request.authorization, request.origin, request.host}, nullptr, "127.0.0.1:9901");
    if (access.status == 0) {
      Response r = handle_request(backend, request.method, request.path, request.query);
      if (r.status < 200 || r.status > 599) __builtin_trap();
    }
    input.remove_prefix(parsed.consumed);
  }
  return 0;
}
