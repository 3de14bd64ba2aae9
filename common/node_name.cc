// SPDX-License-Identifier: Apache-2.0
#include "common/node_name.h"

#include <cstdio>

#include "common/protocol_limits.h"

namespace rdmagw {

namespace {
bool allowed(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}
}  // namespace

std::string node_name_problem(std::string_view name) {
  if (name.empty()) return "empty (" + std::string(kNodeNameRule) + ")";
  if (name.size() > kMaxNodeNameLength)
    return std::to_string(name.size()) + " bytes long (" + std::string(kNodeNameRule) + ")";
  for (size_t i = 0; i < name.size(); ++i) {
    auto c = static_cast<unsigned char>(name[i]);
    if (allowed(c)) continue;
    char shown[8];
    std::snprintf(shown, sizeof(shown), "0x%02x", c);
    return "byte " + std::to_string(i + 1) + " is " + shown +
           (c >= 0x20 && c < 0x7f ? " ('" + std::string(1, static_cast<char>(c)) + "')" : std::string()) + " (" +
           std::string(kNodeNameRule) + ")";
  }
  return {};
}

}  // namespace rdmagw
