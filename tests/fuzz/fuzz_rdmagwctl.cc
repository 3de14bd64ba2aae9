// SPDX-License-Identifier: Apache-2.0
// rdmagwctl's parsers (tools/rdmagwctl/) on arbitrary answers: the HTTP
// response framing (Content-Length only) and the JSON an admin endpoint, or
// anything posing as one, sends (nlohmann-json behind rdmagwctl's depth
// limit), printed back as `--json` does: what is printed parses to the same.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tools/rdmagwctl/http_response.h"
#include "tools/rdmagwctl/json.h"

using namespace rdmagw::ctl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    std::string error;
    if (auto value = parse_json(text, &error)) {
      std::string printed = to_json(*value);
      auto again = parse_json(printed, &error);
      if (!again || to_json(*again) != printed) __builtin_trap();
    }
  } else {
    HttpResponse response;
    std::string error;
    ParseStatus status = parse_http_response(text, (data[0] & 2) != 0, &response, &error);
    if (status == ParseStatus::kComplete && (response.status < 100 || response.status > 999)) __builtin_trap();
    if (status == ParseStatus::kComplete) {
      std::string json_error;
      (void)parse_json(response.body, &json_error);
    }
  }
  return 0;
}
