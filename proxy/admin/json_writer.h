// SPDX-License-Identifier: Apache-2.0
#pragma once
// A small streaming JSON writer for the admin endpoint's answers. It appends
// to one string as the caller walks its data, and places commas and colons
// itself, so renderers read like the document they produce:
//
//   JsonWriter w;
//   w.begin_object().field("name", "redis").field("active", 2);
//   w.key("errors").begin_array().value("bad port").end_array();
//   w.end_object();
//
// It does not check that calls nest properly (a key inside an array, a
// missing end_object); the renderers are few and their tests parse the output.
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_string.h"

namespace rdmagw::admin {

using rdmagw::append_json_string;

// Appends a finite double in the shortest form that reads back to the same
// value, without an exponent for everyday magnitudes (0.0003, not 3e-04);
// NaN and infinities, which JSON cannot carry, become null.
void append_json_double(std::string* out, double value);

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  // The name of the next member; the next call writes its value.
  JsonWriter& key(std::string_view name);

  JsonWriter& value(std::string_view text);
  // Without this overload a string literal would pick value(bool): a
  // pointer-to-bool conversion beats the user-defined one to string_view.
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(bool b);
  JsonWriter& value(double number);
  template <std::integral T>
  requires(!std::same_as<T, bool>) JsonWriter& value(T number) {
    before_value();
    out_ += std::to_string(number);
    return *this;
  }
  JsonWriter& null();

  // key(name) then value(v).
  template <typename T>
  JsonWriter& field(std::string_view name, const T& v) {
    key(name);
    return value(v);
  }
  // key(name) then an array of strings.
  JsonWriter& string_array(std::string_view name, const std::vector<std::string>& items);

  std::string take() { return std::move(out_); }

 private:
  // Writes the comma that separates this value from the previous one in the
  // enclosing object or array, unless it is the first or follows its key.
  void before_value();

  std::string out_;
  // One entry per open object or array: true until its first member.
  std::vector<bool> scope_is_empty_;
  bool after_key_ = false;
};

}  // namespace rdmagw::admin
