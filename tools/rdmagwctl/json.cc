// SPDX-License-Identifier: Apache-2.0
#include "tools/rdmagwctl/json.h"

#include <cmath>
#include <limits>

namespace rdmagw::ctl {

namespace {

// The deepest nesting of arrays and objects in `text`, brackets inside
// strings not counted; stops counting once past `limit`.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) break;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

const Json& empty_object() {
  static const Json kEmpty = Json::object();
  return kEmpty;
}

const Json& empty_array() {
  static const Json kEmpty = Json::array();
  return kEmpty;
}

}  // namespace

std::optional<Json> parse_json(std::string_view text, std::string* error) {
  if (nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth) {
    *error = "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return std::nullopt;
  }
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    *error = "offset " + std::to_string(e.byte) + ": " + e.what();
    return std::nullopt;
  } catch (const Json::exception& e) {  // out_of_range: a number beyond a double
    *error = e.what();
    return std::nullopt;
  }
}

const Json* find(const Json& value, std::string_view key) {
  if (!value.is_object()) return nullptr;
  auto it = value.find(std::string(key));
  return it == value.end() ? nullptr : &*it;
}

std::string string_or(const Json& value, std::string_view key, std::string_view fallback) {
  const Json* member = find(value, key);
  return member && member->is_string() ? member->get<std::string>() : std::string(fallback);
}

double number_or(const Json& value, std::string_view key, double fallback) {
  const Json* member = find(value, key);
  return member && member->is_number() ? member->get<double>() : fallback;
}

std::optional<int64_t> int_value(const Json& value) {
  if (value.is_number_unsigned()) {
    uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    double d = value.get<double>();
    constexpr double kExact = 9007199254740992.0;  // 2^53
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= kExact) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

int64_t int_or(const Json& value, std::string_view key, int64_t fallback) {
  const Json* member = find(value, key);
  if (!member || !member->is_number()) return fallback;
  if (auto exact = int_value(*member)) return *exact;
  // A fraction is cut off; beyond int64 it is held at the limit.
  double d = member->get<double>();
  if (std::isnan(d)) return fallback;
  if (d >= 9223372036854775807.0) return std::numeric_limits<int64_t>::max();
  if (d <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(d);
}

bool bool_or(const Json& value, std::string_view key, bool fallback) {
  const Json* member = find(value, key);
  return member && member->is_boolean() ? member->get<bool>() : fallback;
}

const Json& object_at(const Json& value, std::string_view key) {
  const Json* member = find(value, key);
  return member && member->is_object() ? *member : empty_object();
}

const Json& array_at(const Json& value, std::string_view key) {
  const Json* member = find(value, key);
  return member && member->is_array() ? *member : empty_array();
}

std::string string_value(const Json& value) { return value.is_string() ? value.get<std::string>() : std::string(); }

std::string to_json(const Json& value, int indent) {
  std::string text = value.dump(indent > 0 ? indent : -1, ' ', false, Json::error_handler_t::replace);
  // nlohmann-json escapes only what JSON must (below 0x20): DEL and the C1
  // controls pass raw. The dump is well-formed UTF-8 and such bytes can only
  // be inside string literals, where a \u escape means the same character.
  if (text.find('\x7F') == std::string::npos && text.find('\xC2') == std::string::npos) return text;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() + 16);
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if (c == 0x7F) {
      out += "\\u007f";
    } else if (c == 0xC2 && next >= 0x80 && next <= 0x9F) {
      out += "\\u00";
      out += kHex[next >> 4];
      out += kHex[next & 0xF];
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string json_quote(std::string_view text) { return to_json(Json(std::string(text)), 0); }

}  // namespace rdmagw::ctl
