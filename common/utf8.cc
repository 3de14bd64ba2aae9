// SPDX-License-Identifier: Apache-2.0
#include "common/utf8.h"

#include <cstdint>

namespace rdmagw {

size_t utf8_sequence_length(std::string_view text, size_t i) {
  auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  auto is_continuation = [&](size_t k) { return k < text.size() && (byte(k) & 0xC0) == 0x80; };
  const uint8_t lead = byte(i);
  // The allowed range of the second byte depends on the lead byte; this is
  // what rules out overlong encodings, UTF-16 surrogates and > U+10FFFF
  // (Unicode 15, table 3-7).
  size_t length = 0;
  uint8_t second_lo = 0x80, second_hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_lo = 0xA0;
    if (lead == 0xED) second_hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_lo = 0x90;
    if (lead == 0xF4) second_hi = 0x8F;
  } else {
    return 0;  // a continuation byte, C0/C1 (always overlong) or F5..FF
  }
  if (i + 1 >= text.size() || byte(i + 1) < second_lo || byte(i + 1) > second_hi) return 0;
  for (size_t k = i + 2; k < i + length; ++k)
    if (!is_continuation(k)) return 0;
  return length;
}

}  // namespace rdmagw
