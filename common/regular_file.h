// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reading a file named in the configuration (the configuration itself, key
// files, certificates) without letting the file decide how long that takes:
// opened non-blocking, only a regular file, only up to a size. A FIFO, a
// device (a symlink to /dev/zero) or a socket at the path is refused at
// once; a read by SIGHUP or POST /reload can then never hang the process.
#include <sys/stat.h>

#include <cstdint>
#include <string>

#include "common/unique_fd.h"

namespace rdmagw {

// Open for reading, or invalid with *error ("not a regular file (a FIFO)",
// "2000000 bytes; at most 1048576"). *st is the file's stat.
UniqueFd open_regular_file(const std::string& path, uint64_t max_bytes, struct stat* st, std::string* error);

// The whole content, at most `max_bytes` (a file that grew past it since
// the open is refused too).
bool read_regular_file(const std::string& path, uint64_t max_bytes, std::string* out, std::string* error);
// The same, of a file open_regular_file() opened (`st` its stat), for a
// caller that checks the open file before it reads.
bool read_opened_file(int fd, const struct stat& st, uint64_t max_bytes, std::string* out, std::string* error);

// Reads at most `capacity` bytes of an open file into `buffer`; *got: how
// many. False with *error on a read error.
bool read_up_to(int fd, uint8_t* buffer, size_t capacity, size_t* got, std::string* error);

}  // namespace rdmagw
