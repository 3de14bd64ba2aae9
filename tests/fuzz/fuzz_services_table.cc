// SPDX-License-Identifier: Apache-2.0
// The services table (config/services_table.h): bytes a sidecar maps from
// a file that only root or its own uid may write, checked whole before use.
// The checksum is made to match each input first, so that the fuzzer
// explores what a writer could put behind a valid one (the unit tests
// cover the checksum itself); a table that opens must be walkable and
// consistent, and nothing may be read outside the input.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "common/crc32c.h"
#include "config/services_table_builder.h"
#include "services_table_walk.h"

using namespace rdmagw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<OwnedTableBytes>(size);
  if (size) std::memcpy(bytes->data(), data, size);
  if (size >= sizeof(services_table::Header)) {
    uint32_t sum = crc32c(bytes->data() + services_table::kChecksummedFrom, size - services_table::kChecksummedFrom);
    std::memcpy(bytes->data() + offsetof(services_table::Header, checksum), &sum, sizeof(sum));
  }
  std::string error;
  auto table = ServiceTable::open(bytes, &error);
  if (!table) {
    if (error.empty()) __builtin_trap();
    return 0;
  }
  walk_services_table(*table, false);
  return 0;
}
