// SPDX-License-Identifier: Apache-2.0
#pragma once
// A small, strict JSON (RFC 8259) reader for the admin endpoint's answers,
// and a writer that prints a parsed tree back out. Objects keep the server's
// key order so that `--json` output reads like docs/admin.md; numbers keep
// their original text so that printing them back never changes a digit.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rdmagw::ctl {

struct JsonMember;

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  JsonValue() = default;  // null

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // Typed reads; each returns a neutral value (false, 0, "", empty) when the
  // value has another type, so rendering code can stay linear.
  bool as_bool() const { return type_ == Type::kBool && bool_; }
  double as_double() const { return type_ == Type::kNumber ? number_ : 0; }
  // Set when the number is integral and fits: a plain integer literal within
  // int64, or a fraction/exponent literal whose value is a whole number
  // within +-2^53 (where a double is still exact).
  std::optional<int64_t> as_int64() const { return integral_ ? std::optional<int64_t>(int_) : std::nullopt; }
  const std::string& as_string() const { return type_ == Type::kString ? text_ : kEmptyString; }
  // The number exactly as written in the input.
  const std::string& number_text() const { return type_ == Type::kNumber ? text_ : kEmptyString; }
  const std::vector<JsonValue>& items() const { return items_; }
  const std::vector<JsonMember>& members() const { return members_; }

  // The first member named `key`, or nullptr (also when this is no object).
  const JsonValue* find(std::string_view key) const;
  // Lenient member reads for display: the fallback when absent or mistyped.
  std::string string_or(std::string_view key, std::string_view fallback = "") const;
  double number_or(std::string_view key, double fallback = 0) const;
  int64_t int_or(std::string_view key, int64_t fallback = 0) const;
  bool bool_or(std::string_view key, bool fallback = false) const;
  // The member if it is an object/array, else a shared empty one.
  const JsonValue& object_at(std::string_view key) const;
  const std::vector<JsonValue>& array_at(std::string_view key) const;

 private:
  friend class JsonParser;
  static const std::string kEmptyString;

  Type type_ = Type::kNull;
  bool bool_ = false;
  bool integral_ = false;
  double number_ = 0;
  int64_t int_ = 0;
  std::string text_;  // a string's UTF-8 bytes, or a number's literal
  std::vector<JsonValue> items_;
  std::vector<JsonMember> members_;
};

struct JsonMember {
  std::string key;
  JsonValue value;
};

struct JsonError {
  size_t offset = 0;  // byte offset into the input where the problem is
  std::string message;
  // "offset 17: expected ':' after an object key"
  std::string to_string() const;
};

// Parses exactly one JSON value (surrounded only by whitespace). On failure
// returns nullopt and fills *error.
std::optional<JsonValue> parse_json(std::string_view text, JsonError* error);

// Writes `value` as JSON: indented by `indent` spaces per level with one
// member per line, or compact on one line when indent is 0.
std::string to_json(const JsonValue& value, int indent = 2);

// `text` as a JSON string literal, quotes included.
std::string json_quote(std::string_view text);

}  // namespace rdmagw::ctl
