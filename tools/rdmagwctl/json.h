// SPDX-License-Identifier: Apache-2.0
#pragma once
// The admin endpoint's answers, read with nlohmann-json (Debian's
// nlohmann-json3-dev). ordered_json keeps the server's key order, so that
// `--json` output reads like docs/admin.md. The readers below are lenient on
// purpose: a view shows "-" or 0 for a field that an older or newer rdmagw
// does not send, or sends with another type, rather than failing.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace rdmagw::ctl {

using Json = nlohmann::ordered_json;

// Nesting deeper than this is refused before parsing: the admin server's
// answers nest a few levels, and printing a parsed tree recurses.
inline constexpr int kMaxJsonDepth = 64;

// Parses exactly one JSON value (surrounded only by whitespace). On failure
// returns nullopt and sets *error, naming the byte offset:
// "offset 17: syntax error ... (parse error)".
std::optional<Json> parse_json(std::string_view text, std::string* error);

// The member `key` of an object, or nullptr (also when `value` is no object).
const Json* find(const Json& value, std::string_view key);
std::string string_or(const Json& value, std::string_view key, std::string_view fallback = "");
double number_or(const Json& value, std::string_view key, double fallback = 0);
// A number as int64: a fraction cut off, held at int64's limits.
int64_t int_or(const Json& value, std::string_view key, int64_t fallback = 0);
bool bool_or(const Json& value, std::string_view key, bool fallback = false);
// The member if it is an object / array, else a shared empty one.
const Json& object_at(const Json& value, std::string_view key);
const Json& array_at(const Json& value, std::string_view key);
// A value itself: its string ("" for another type); its integer when it is
// integral and exact (an integer within int64, or a whole number written
// with a fraction or exponent within +-2^53, where a double is exact).
std::string string_value(const Json& value);
std::optional<int64_t> int_value(const Json& value);

// `value` as JSON text: indented by `indent` spaces per level, or compact on
// one line when indent is 0. Bytes that are not UTF-8 print as U+FFFD.
// Besides the control characters below 0x20, which JSON itself escapes, DEL
// and the C1 controls (U+0080..U+009F) are written as \u escapes too, so the
// text holds no byte a terminal acts on (terminal_text.h), whatever strings
// the server sent.
std::string to_json(const Json& value, int indent = 2);

// `text` as a JSON string literal, quotes included.
std::string json_quote(std::string_view text);

}  // namespace rdmagw::ctl
