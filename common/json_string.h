// SPDX-License-Identifier: Apache-2.0
#pragma once
// A JSON string literal, shared by the admin endpoint (json_writer.h) and
// the access log's json format.
#include <string>
#include <string_view>

namespace rdmagw {

// Appends `text` as a JSON string literal, quotes included: `"` and `\` are
// escaped, control characters become \n, \t... or \u00XX, valid UTF-8 passes
// through as is, and bytes that are not valid UTF-8 become U+FFFD.
void append_json_string(std::string* out, std::string_view text);

}  // namespace rdmagw
