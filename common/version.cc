// SPDX-License-Identifier: Apache-2.0
#include "common/version.h"

#include "version_commit.h"  // generated: RDMAGW_COMMIT

namespace rdmagw {

std::string_view release_version() { return RDMAGW_VERSION; }

std::string_view build_commit() { return RDMAGW_COMMIT; }

std::string version_line(std::string_view program) {
  std::string line(program);
  line += ' ';
  line += release_version();
  line += " (commit ";
  line += build_commit();
  line += ')';
  return line;
}

}  // namespace rdmagw
