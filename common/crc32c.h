// SPDX-License-Identifier: Apache-2.0
#pragma once
// CRC-32C (Castagnoli), as iSCSI, ext4 and Go's hash/crc32 compute it: the
// services table's checksum (config/services_table_format.h). With SSE4.2
// the CPU's crc32 instruction (gigabytes a second), else a table.
#include <cstddef>
#include <cstdint>

namespace rdmagw {

uint32_t crc32c(const void* data, size_t size);

}  // namespace rdmagw
