// SPDX-License-Identifier: Apache-2.0
#pragma once
// "Did you mean": for an unknown configuration key, the allowed key it is
// most likely a slip of (a letter missing, added, changed, or two swapped),
// so that the error names the fix instead of only listing every key.
#include <optional>
#include <string_view>

#include "config/config_keys.h"

namespace rdmagw {

// The allowed key closest to `name` by edits of one letter (insert, delete,
// replace, swap two neighbours), if it takes at most one edit per three
// letters of `name` and no more than two; ties go to the first in `allowed`.
std::optional<std::string_view> closest_key(std::string_view name, const config_keys::Keys& allowed);

// The number of such edits from `a` to `b` (optimal string alignment).
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace rdmagw
