// SPDX-License-Identifier: Apache-2.0
// The admin endpoint's request router and access check (proxy/admin/) on
// arbitrary requests: method, path, query and the headers that decide
// access, one per line of the input. The backend answers with fixed data.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/secret_keys.h"
#include "fixed_backend.h"
#include "proxy/admin/admin_access.h"
#include "proxy/admin/admin_routes.h"

using namespace rdmagw;
using namespace rdmagw::admin;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static FixedBackend backend;
  static const SecretKeys* token = [] {
    auto* t = new SecretKeys;
    t->add(std::string(32, 't'));
    return t;
  }();
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  for (int i = 0; i < 6; ++i) {
    size_t nl = text.find('\n');
    parts.push_back(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  }
  auto header = [&](size_t i) -> std::optional<std::string_view> {
    if (parts[i].empty()) return std::nullopt;
    return parts[i];
  };
  AccessRequest request{parts[1], header(3), header(4), header(5)};
  AccessDecision with = check_access(request, token, "127.0.0.1:9901");
  AccessDecision without = check_access(request, nullptr, "127.0.0.1:9901");
  if (with.status != 0 && with.status != 401) __builtin_trap();
  if (without.status != 0 && without.status != 403) __builtin_trap();
  Response r = handle_request(backend, parts[0], parts[1], parts[2]);
  if (r.status < 200 || r.status > 599) __builtin_trap();
  return 0;
}
