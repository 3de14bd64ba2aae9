// SPDX-License-Identifier: Apache-2.0
// The services file (config/services_file.h): what rdmagw-k8s writes and a
// sidecar reads. Whatever parses must hold together: each lookup finds what
// the table lists, and the ready list holds the ready endpoints only.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "config/services_file.h"
#include "services_table_walk.h"

using namespace rdmagw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::shared_ptr<const ServiceTable> table;
  std::string error;
  if (!parse_services_file(text, &table, &error)) {
    if (error.empty()) __builtin_trap();
    return 0;
  }
  walk_services_table(*table, true);
  return 0;
}
