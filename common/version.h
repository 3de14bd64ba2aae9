// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the binaries are: the release (the project's version) and the commit
// they were built from (cmake/version_commit.cmake), for --version, the
// `ready` log line and /stats.
#include <string>
#include <string_view>

namespace rdmagw {

std::string_view release_version();
// 12 hex digits, "-dirty" after them for a tree with changes, or "unknown".
std::string_view build_commit();
// "rdmagw 0.1.0 (commit 0123456789ab)".
std::string version_line(std::string_view program);

}  // namespace rdmagw
