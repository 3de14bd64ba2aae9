// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reading admin JSON fields for display, shared by the view files.
#include <cstdint>
#include <string>
#include <string_view>

#include "tools/rdmagwctl/json.h"

namespace rdmagw::ctl {

// A counter: never negative, 0 when absent.
inline uint64_t counter(const Json& object, std::string_view key) {
  int64_t v = int_or(object, key, 0);
  return v < 0 ? 0 : static_cast<uint64_t>(v);
}

inline std::string counter_text(const Json& object, std::string_view key) {
  return std::to_string(counter(object, key));
}

// A string field, or "-" when absent or empty, so table cells never vanish.
inline std::string text_or_dash(const Json& object, std::string_view key) {
  std::string s = string_or(object, key);
  return s.empty() ? "-" : s;
}

}  // namespace rdmagw::ctl
