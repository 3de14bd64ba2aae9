// SPDX-License-Identifier: Apache-2.0
#include "tools/rdmagwctl/terminal_text.h"

#include <cstdint>

#include "common/utf8.h"

namespace rdmagw::ctl {

namespace {

constexpr char kHex[] = "0123456789abcdef";

void append_hex(std::string* out, const char* prefix, uint8_t byte) {
  out->append(prefix);
  out->push_back(kHex[byte >> 4]);
  out->push_back(kHex[byte & 0xF]);
}

}  // namespace

std::string terminal_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<uint8_t>(text[i]);
    if (c >= 0x80) {
      size_t length = utf8_sequence_length(text, i);
      if (length == 0) {
        append_hex(&out, "\\x", c);  // not UTF-8: each such byte on its own
        i += 1;
      } else if (c == 0xC2 && static_cast<uint8_t>(text[i + 1]) <= 0x9F) {
        append_hex(&out, "\\u00", static_cast<uint8_t>(text[i + 1]));  // C1: U+0080..U+009F
        i += 2;
      } else {
        out.append(text.substr(i, length));
        i += length;
      }
      continue;
    }
    switch (c) {
      case '\\':
        out.append("\\\\");
        break;
      case '\t':
        out.append("\\t");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      default:
        if (c < 0x20 || c == 0x7F)
          append_hex(&out, "\\x", c);
        else
          out.push_back(static_cast<char>(c));
    }
    i += 1;
  }
  return out;
}

Json terminal_json(const Json& value) {
  if (value.is_string()) return terminal_text(value.get_ref<const std::string&>());
  if (value.is_array()) {
    Json out = Json::array();
    for (const auto& item : value) out.push_back(terminal_json(item));
    return out;
  }
  if (value.is_object()) {
    Json out = Json::object();
    // Two names may escape alike only if they were equal: escaping is
    // one-to-one, so no member is lost.
    for (const auto& member : value.items()) out[terminal_text(member.key())] = terminal_json(member.value());
    return out;
  }
  return value;
}

}  // namespace rdmagw::ctl
