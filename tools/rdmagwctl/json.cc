// SPDX-License-Identifier: Apache-2.0
#include "tools/rdmagwctl/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/json_string.h"

namespace rdmagw::ctl {

const std::string JsonValue::kEmptyString;

namespace {

const JsonValue& empty_value() {
  static const JsonValue kEmpty;
  return kEmpty;
}

const std::vector<JsonValue>& empty_array() {
  static const std::vector<JsonValue> kEmpty;
  return kEmpty;
}

// Deep enough for any admin answer; shallow enough that hostile input cannot
// exhaust the stack through recursion.
constexpr int kMaxDepth = 256;

// 2^53: beyond it a double no longer holds every integer exactly.
constexpr double kMaxExactDouble = 9007199254740992.0;

void append_utf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

// Recursive descent over the RFC 8259 grammar. Every error names the byte
// offset where the input stopped making sense.
class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  std::optional<JsonValue> parse_document(JsonError* error) {
    JsonValue value;
    skip_whitespace();
    if (!parse_value(&value, 0)) {
      *error = error_;
      return std::nullopt;
    }
    skip_whitespace();
    if (pos_ != text_.size()) {
      fail("unexpected " + describe_here() + " after the value");
      *error = error_;
      return std::nullopt;
    }
    return value;
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  bool fail(std::string message) { return fail_at(pos_, std::move(message)); }
  bool fail_at(size_t offset, std::string message) {
    error_.offset = offset;
    error_.message = std::move(message);
    return false;
  }

  // What sits at the current position, for messages: "end of input", "'x'"
  // or a hex byte when it is not printable.
  std::string describe_here() const {
    if (at_end()) return "end of input";
    unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c >= 0x20 && c < 0x7F) return std::string("'") + static_cast<char>(c) + "'";
    char buf[16];
    snprintf(buf, sizeof(buf), "byte 0x%02X", c);
    return buf;
  }

  void skip_whitespace() {
    while (!at_end()) {
      char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  bool parse_value(JsonValue* out, int depth) {
    if (depth > kMaxDepth) return fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    switch (peek()) {
      case '{':
        return parse_object(out, depth);
      case '[':
        return parse_array(out, depth);
      case '"':
        out->type_ = JsonValue::Type::kString;
        return parse_string(&out->text_);
      case 't':
        return parse_literal("true", out, JsonValue::Type::kBool, true);
      case 'f':
        return parse_literal("false", out, JsonValue::Type::kBool, false);
      case 'n':
        return parse_literal("null", out, JsonValue::Type::kNull, false);
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return parse_number(out);
        return fail("expected a value, found " + describe_here());
    }
  }

  bool parse_literal(std::string_view word, JsonValue* out, JsonValue::Type type, bool value) {
    if (text_.substr(pos_, word.size()) != word) return fail("invalid literal, expected '" + std::string(word) + "'");
    pos_ += word.size();
    out->type_ = type;
    out->bool_ = value;
    return true;
  }

  bool parse_object(JsonValue* out, int depth) {
    out->type_ = JsonValue::Type::kObject;
    ++pos_;  // '{'
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      return true;
    }
    for (;;) {
      skip_whitespace();
      if (peek() != '"') return fail("expected a string key, found " + describe_here());
      JsonMember member;
      if (!parse_string(&member.key)) return false;
      skip_whitespace();
      if (peek() != ':') return fail("expected ':' after an object key, found " + describe_here());
      ++pos_;
      skip_whitespace();
      if (!parse_value(&member.value, depth + 1)) return false;
      out->members_.push_back(std::move(member));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return true;
      }
      return fail("expected ',' or '}' in an object, found " + describe_here());
    }
  }

  bool parse_array(JsonValue* out, int depth) {
    out->type_ = JsonValue::Type::kArray;
    ++pos_;  // '['
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      return true;
    }
    for (;;) {
      skip_whitespace();
      JsonValue item;
      if (!parse_value(&item, depth + 1)) return false;
      out->items_.push_back(std::move(item));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return true;
      }
      return fail("expected ',' or ']' in an array, found " + describe_here());
    }
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  bool parse_number(JsonValue* out) {
    size_t start = pos_;
    auto digits = [&] {
      size_t from = pos_;
      while (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (peek() >= '0' && peek() <= '9') return fail("leading zero in a number");
    } else if (digits() == 0) {
      return fail("expected a digit, found " + describe_here());
    }
    bool plain_integer = true;
    if (peek() == '.') {
      plain_integer = false;
      ++pos_;
      if (digits() == 0) return fail("expected a digit after '.', found " + describe_here());
    }
    if (peek() == 'e' || peek() == 'E') {
      plain_integer = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) return fail("expected a digit in the exponent, found " + describe_here());
    }
    out->type_ = JsonValue::Type::kNumber;
    out->text_ = std::string(text_.substr(start, pos_ - start));
    // strtod needs a terminated string; the grammar above already vouched
    // for the text, and a C++ program runs in the "C" locale unless it asks.
    out->number_ = std::strtod(out->text_.c_str(), nullptr);
    if (!std::isfinite(out->number_)) return fail_at(start, "number out of range");
    if (plain_integer) {
      const char* first = out->text_.data();
      const char* last = first + out->text_.size();
      auto [end, ec] = std::from_chars(first, last, out->int_);
      out->integral_ = ec == std::errc() && end == last;
    }
    if (!out->integral_ && std::trunc(out->number_) == out->number_ && std::fabs(out->number_) <= kMaxExactDouble) {
      out->int_ = static_cast<int64_t>(out->number_);
      out->integral_ = true;
    }
    return true;
  }

  bool parse_hex4(uint32_t* out) {
    if (text_.size() - pos_ < 4) return fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<uint32_t>(c - 'A' + 10);
      else
        return fail("expected a hex digit in a \\u escape, found " + describe_here());
      ++pos_;
    }
    *out = v;
    return true;
  }

  // After "\u": one code point, or a surrogate pair written as two escapes.
  bool parse_unicode_escape(std::string* out) {
    size_t escape_start = pos_ - 2;
    uint32_t cp;
    if (!parse_hex4(&cp)) return false;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return fail_at(escape_start, "lone low surrogate in a \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (text_.substr(pos_, 2) != "\\u")
        return fail_at(escape_start, "high surrogate not followed by a \\u low surrogate");
      pos_ += 2;
      uint32_t low;
      if (!parse_hex4(&low)) return false;
      if (low < 0xDC00 || low > 0xDFFF) return fail_at(pos_ - 6, "high surrogate followed by a non-low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, cp);
    return true;
  }

  // One raw (unescaped) UTF-8 sequence starting at pos_, checked for
  // overlongs, surrogates and truncation, copied to out.
  bool copy_utf8_sequence(std::string* out) {
    size_t start = pos_;
    unsigned char lead = static_cast<unsigned char>(text_[pos_]);
    int length;
    uint32_t cp;
    if (lead >= 0xC2 && lead <= 0xDF)
      length = 2, cp = lead & 0x1F;
    else if (lead >= 0xE0 && lead <= 0xEF)
      length = 3, cp = lead & 0x0F;
    else if (lead >= 0xF0 && lead <= 0xF4)
      length = 4, cp = lead & 0x07;
    else
      return fail("invalid UTF-8 lead byte in a string");
    if (text_.size() - pos_ < static_cast<size_t>(length)) return fail("truncated UTF-8 sequence in a string");
    for (int i = 1; i < length; ++i) {
      unsigned char c = static_cast<unsigned char>(text_[pos_ + i]);
      if ((c & 0xC0) != 0x80) return fail("invalid UTF-8 continuation byte in a string");
      cp = (cp << 6) | (c & 0x3F);
    }
    bool overlong = (length == 3 && cp < 0x800) || (length == 4 && cp < 0x10000);
    if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return fail("invalid UTF-8 sequence in a string");
    out->append(text_.substr(start, static_cast<size_t>(length)));
    pos_ += static_cast<size_t>(length);
    return true;
  }

  bool parse_string(std::string* out) {
    size_t start = pos_;
    ++pos_;  // opening quote
    for (;;) {
      if (at_end()) return fail_at(start, "unterminated string");
      unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return fail("control character in a string (must be escaped)");
      if (c >= 0x80) {
        if (!copy_utf8_sequence(out)) return false;
        continue;
      }
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) return fail_at(start, "unterminated string");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u':
          if (!parse_unicode_escape(out)) return false;
          break;
        default: {
          size_t backslash = pos_ - 2;
          --pos_;
          return fail_at(backslash, "invalid escape: backslash followed by " + describe_here());
        }
      }
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
  JsonError error_;
};

const JsonValue* JsonValue::find(std::string_view key) const {
  for (const auto& m : members_)
    if (m.key == key) return &m.value;
  return nullptr;
}

std::string JsonValue::string_or(std::string_view key, std::string_view fallback) const {
  const JsonValue* v = find(key);
  return v && v->is_string() ? v->text_ : std::string(fallback);
}

double JsonValue::number_or(std::string_view key, double fallback) const {
  const JsonValue* v = find(key);
  return v && v->is_number() ? v->number_ : fallback;
}

int64_t JsonValue::int_or(std::string_view key, int64_t fallback) const {
  const JsonValue* v = find(key);
  if (!v || !v->is_number()) return fallback;
  if (v->integral_) return v->int_;
  // Truncated toward zero, clamped: casting an out-of-range double is undefined.
  if (std::isnan(v->number_)) return fallback;
  if (v->number_ >= 9.2e18) return INT64_MAX;
  if (v->number_ <= -9.2e18) return INT64_MIN;
  return static_cast<int64_t>(v->number_);
}

bool JsonValue::bool_or(std::string_view key, bool fallback) const {
  const JsonValue* v = find(key);
  return v && v->is_bool() ? v->bool_ : fallback;
}

const JsonValue& JsonValue::object_at(std::string_view key) const {
  const JsonValue* v = find(key);
  return v && v->is_object() ? *v : empty_value();
}

const std::vector<JsonValue>& JsonValue::array_at(std::string_view key) const {
  const JsonValue* v = find(key);
  return v && v->is_array() ? v->items_ : empty_array();
}

std::string JsonError::to_string() const { return "offset " + std::to_string(offset) + ": " + message; }

std::optional<JsonValue> parse_json(std::string_view text, JsonError* error) {
  return JsonParser(text).parse_document(error);
}

std::string json_quote(std::string_view text) {
  std::string out;
  append_json_string(&out, text);
  return out;
}

namespace {

void write_json(const JsonValue& v, int indent, int level, std::string* out) {
  auto newline = [&](int at_level) {
    if (indent <= 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(indent * at_level), ' ');
  };
  switch (v.type()) {
    case JsonValue::Type::kNull:
      *out += "null";
      break;
    case JsonValue::Type::kBool:
      *out += v.as_bool() ? "true" : "false";
      break;
    case JsonValue::Type::kNumber:
      *out += v.number_text();
      break;
    case JsonValue::Type::kString:
      *out += json_quote(v.as_string());
      break;
    case JsonValue::Type::kArray: {
      if (v.items().empty()) {
        *out += "[]";
        break;
      }
      out->push_back('[');
      bool first = true;
      for (const auto& item : v.items()) {
        if (!first) out->push_back(',');
        first = false;
        newline(level + 1);
        write_json(item, indent, level + 1, out);
      }
      newline(level);
      out->push_back(']');
      break;
    }
    case JsonValue::Type::kObject: {
      if (v.members().empty()) {
        *out += "{}";
        break;
      }
      out->push_back('{');
      bool first = true;
      for (const auto& m : v.members()) {
        if (!first) out->push_back(',');
        first = false;
        newline(level + 1);
        *out += json_quote(m.key);
        *out += indent > 0 ? ": " : ":";
        write_json(m.value, indent, level + 1, out);
      }
      newline(level);
      out->push_back('}');
      break;
    }
  }
}

}  // namespace

std::string to_json(const JsonValue& value, int indent) {
  std::string out;
  write_json(value, indent, 0, &out);
  return out;
}

}  // namespace rdmagw::ctl
