// SPDX-License-Identifier: Apache-2.0
// Endpoint, address and route-match parsing (common/address.h,
// common/route_match.h): what the config and OPEN frames hand them. Whatever
// parses must print back as text that parses to the same thing (the
// allowlist compares canonical text).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/address.h"
#include "common/route_match.h"

using namespace rdmagw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string error;
  if (auto ep = parse_endpoint(text, &error)) {
    std::string canonical = ep->to_string();
    auto again = parse_endpoint(canonical, &error);
    if (!again || again->to_string() != canonical) __builtin_trap();
    (void)is_loopback(*ep);
  }
  if (auto hp = parse_host_port(text, &error)) (void)hp->to_string();
  if (auto m = parse_route_match(text, &error)) {
    std::string canonical = m->to_string();
    auto again = parse_route_match(canonical, &error);
    if (!again || again->to_string() != canonical) __builtin_trap();
  }
  size_t colon = text.rfind(':');
  if (colon != std::string_view::npos) {
    uint16_t port = 0;
    for (char c : text.substr(colon + 1)) port = static_cast<uint16_t>(port * 10 + (c & 15));
    (void)make_tcp_endpoint(text.substr(0, colon), port, &error);
  }
  return 0;
}
