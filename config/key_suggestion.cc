// SPDX-License-Identifier: Apache-2.0
#include "config/key_suggestion.h"

#include <algorithm>
#include <vector>

namespace rdmagw {

size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rows of the dynamic programme: the swap of two neighbours looks
  // two rows back.
  std::vector<size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        current[j] = std::min(current[j], before[j - 2] + 1);
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::optional<std::string_view> closest_key(std::string_view name, const config_keys::Keys& allowed) {
  const size_t limit = std::min<size_t>(2, std::max<size_t>(1, name.size() / 3));
  std::optional<std::string_view> best;
  size_t best_distance = limit + 1;
  for (std::string_view key : allowed) {
    size_t d = edit_distance(name, key);
    if (d < best_distance) {
      best = key;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace rdmagw
