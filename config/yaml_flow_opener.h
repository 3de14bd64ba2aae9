// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where a YAML flow collection that was never closed opened: yaml-cpp
// reports "end of map flow not found" where it gave up (often the next
// key, or the end of the file), not at the '{' or '[' the user must close.
// This finds that opener, and the key path it stands under, from the text
// alone (block indentation, quotes and comments taken into account), so
// that --check points at the right line.
#include <optional>
#include <string>
#include <string_view>

namespace rdmagw {

struct FlowOpener {
  int line = 0;    // 1-based
  int column = 0;  // 1-based
  char bracket = '{';
  std::string key_path;  // "listeners[]", "workers", "" at the top
};

// The innermost '{' or '[' still open at `line`:`column` (1-based, where
// the parser stopped); nullopt if none is.
std::optional<FlowOpener> unclosed_flow_opener(std::string_view text, int line, int column);

}  // namespace rdmagw
