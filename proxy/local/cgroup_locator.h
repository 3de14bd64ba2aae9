// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where the local legs' programs attach (local_legs.cgroup): a cgroup v2
// directory named in the configuration, or `pod`, the parent of the cgroup
// rdmagw itself runs in. In a pod that is the pod's cgroup (each container
// has one below it), whose path holds the pod's uid and the runtime's
// naming, unknown when the manifest is written; found here at start, in the
// host's hierarchy mounted into the container (local_legs.cgroup_fs).
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>

namespace rdmagw::local {

inline constexpr std::string_view kPodCgroup = "pod";

// `cgroup` as this process can open it: an absolute path as it is; `pod`:
// the parent of this process's cgroup under `cgroup_fs` (empty: the first
// cgroup2 mount of /proc/self/mountinfo). Nullopt, with why, where that
// cannot be found or would be the root of the hierarchy (every process of
// the host).
std::optional<std::string> locate_legs_cgroup(const std::string& cgroup, const std::string& cgroup_fs,
                                              std::string* why);

// The steps, each on what it reads, for the tests.
// The path after "0::" in a /proc/PID/cgroup text.
std::optional<std::string> unified_cgroup_path(std::string_view proc_cgroup);
// The mount point of the first cgroup2 entry of a /proc/PID/mountinfo text.
std::optional<std::string> first_cgroup2_mount(std::string_view mountinfo);
// The directory under `fs` whose cgroup.procs lists `pid`: `fs` +
// `own_path` when it does (no cgroup namespace between us and `fs`), else
// the first found by a bounded walk of `fs` (a cgroup namespace, as in a
// container, shows `own_path` relative to the container's cgroup).
std::optional<std::string> find_process_cgroup(const std::string& fs, std::string_view own_path, pid_t pid,
                                               std::string* why);
// The parent of `own`, refused where that is `fs` itself.
std::optional<std::string> pod_cgroup_of(const std::string& fs, const std::string& own, std::string* why);

}  // namespace rdmagw::local
