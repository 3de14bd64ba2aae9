// SPDX-License-Identifier: Apache-2.0
#pragma once
// UTF-8 validation for text rdmagw prints as JSON or Prometheus text. Some strings come from
// the network (a peer's node name in its HELLO), and JSON and the Prometheus
// text format must both be valid UTF-8: one stray byte would make a whole
// /stats or /metrics answer unparsable. Valid non-ASCII text passes through
// unchanged; each byte of an invalid sequence becomes U+FFFD.
#include <cstddef>
#include <string>
#include <string_view>

namespace rdmagw {

// "\xEF\xBF\xBD", the replacement character.
inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

// Length (2..4) of the well-formed multi-byte UTF-8 sequence starting at
// text[i], or 0 if the bytes there are not one (overlong forms, surrogates
// and code points above U+10FFFF are not well-formed). text[i] must be >= 0x80.
size_t utf8_sequence_length(std::string_view text, size_t i);

}  // namespace rdmagw
