// SPDX-License-Identifier: Apache-2.0
#include "common/json_string.h"

#include "common/utf8.h"

namespace rdmagw {

void append_json_string(std::string* out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      size_t length = utf8_sequence_length(text, i);
      if (length == 0) {
        out->append(kReplacementCharacter);
        i += 1;
      } else if (length == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) {
        // U+0080..U+009F, the C1 controls (CSI among them): escaped like C0,
        // so a reader printing the answer raw (curl) gets no terminal control.
        out->append("\\u00");
        out->push_back(kHex[static_cast<unsigned char>(text[i + 1]) >> 4]);
        out->push_back(kHex[static_cast<unsigned char>(text[i + 1]) & 0xF]);
        i += 2;
      } else {
        out->append(text.substr(i, length));
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 0xF]);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    i += 1;
  }
  out->push_back('"');
}

}  // namespace rdmagw
