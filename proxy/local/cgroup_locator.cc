// SPDX-License-Identifier: Apache-2.0
#include "proxy/local/cgroup_locator.h"

#include <unistd.h>

#include <charconv>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

namespace rdmagw::local {
namespace {

namespace fs = std::filesystem;

// A node holds a few thousand cgroups (a pod and its containers, system
// units); the walk stops well past that rather than read a hostile tree
// for ever.
constexpr size_t kMaxCgroupsWalked = 100000;

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool lists_pid(const fs::path& dir, pid_t pid) {
  std::optional<std::string> procs = read_text((dir / "cgroup.procs").string());
  if (!procs) return false;
  std::string_view rest = *procs;
  while (!rest.empty()) {
    size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    pid_t listed = 0;
    auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), listed);
    if (ec == std::errc{} && ptr == line.data() + line.size() && listed == pid) return true;
  }
  return false;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_point(std::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && field.size() - i >= 4) {
      int value = 0;
      bool octal = true;
      for (size_t k = 1; k <= 3; ++k) {
        char c = field[i + k];
        if (c < '0' || c > '7') octal = false;
        value = value * 8 + (c - '0');
      }
      if (octal) {
        out.push_back(static_cast<char>(value));
        i += 3;
        continue;
      }
    }
    out.push_back(field[i]);
  }
  return out;
}

std::string normal(const std::string& path) {
  std::string p = fs::path(path).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

}  // namespace

std::optional<std::string> unified_cgroup_path(std::string_view proc_cgroup) {
  while (!proc_cgroup.empty()) {
    size_t end = proc_cgroup.find('\n');
    std::string_view line = proc_cgroup.substr(0, end);
    proc_cgroup = end == std::string_view::npos ? std::string_view{} : proc_cgroup.substr(end + 1);
    if (line.starts_with("0::/")) return std::string(line.substr(3));
  }
  return std::nullopt;
}

std::optional<std::string> first_cgroup2_mount(std::string_view mountinfo) {
  while (!mountinfo.empty()) {
    size_t end = mountinfo.find('\n');
    std::string_view line = mountinfo.substr(0, end);
    mountinfo = end == std::string_view::npos ? std::string_view{} : mountinfo.substr(end + 1);
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    std::vector<std::string_view> fields;
    size_t at = 0;
    while (at < line.size()) {
      size_t space = line.find(' ', at);
      if (space == std::string_view::npos) space = line.size();
      if (space > at) fields.push_back(line.substr(at, space - at));
      at = space + 1;
    }
    for (size_t i = 6; i + 1 < fields.size(); ++i)
      if (fields[i] == "-") {
        if (fields[i + 1] == "cgroup2") return unescape_mount_point(fields[4]);
        break;
      }
  }
  return std::nullopt;
}

std::optional<std::string> find_process_cgroup(const std::string& fs_root, std::string_view own_path, pid_t pid,
                                               std::string* why) {
  const fs::path root(fs_root);
  fs::path direct = root / fs::path(std::string(own_path)).relative_path();
  if (lists_pid(direct, pid)) return normal(direct.string());
  std::deque<fs::path> pending{root};
  size_t walked = 0;
  while (!pending.empty() && walked < kMaxCgroupsWalked) {
    fs::path dir = std::move(pending.front());
    pending.pop_front();
    ++walked;
    if (lists_pid(dir, pid)) return normal(dir.string());
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code type_ec;
      if (it->is_directory(type_ec) && !it->is_symlink(type_ec)) pending.push_back(it->path());
    }
  }
  *why = "no cgroup under " + fs_root + " lists this process (pid " + std::to_string(pid) + ") in its cgroup.procs" +
         (walked >= kMaxCgroupsWalked ? " (stopped after 100000 cgroups)" : "") +
         ": local_legs.cgroup_fs must be where this process sees the host's cgroup v2 hierarchy";
  return std::nullopt;
}

std::optional<std::string> pod_cgroup_of(const std::string& fs_root, const std::string& own, std::string* why) {
  const std::string root = normal(fs_root);
  const std::string self = normal(own);
  if (self == root) {
    *why = "rdmagw runs in the root of the cgroup hierarchy at " + root +
           ", which has no parent: in a container that is usually the container's own view of cgroups (mount the "
           "host's hierarchy and name it in local_legs.cgroup_fs); elsewhere name the cgroup instead of pod";
    return std::nullopt;
  }
  std::string parent = fs::path(self).parent_path().string();
  if (normal(parent) == root) {
    *why = "the parent of rdmagw's cgroup " + self + " is the root of the hierarchy (" + root +
           "), which holds every process of the host: local_legs.cgroup: pod needs rdmagw in a container of a pod "
           "(or a unit inside a slice of its own); name the cgroup instead";
    return std::nullopt;
  }
  return normal(parent);
}

std::optional<std::string> locate_legs_cgroup(const std::string& cgroup, const std::string& cgroup_fs,
                                              std::string* why) {
  if (cgroup != kPodCgroup) return cgroup;
  std::string fs_root = cgroup_fs;
  if (fs_root.empty()) {
    std::optional<std::string> mountinfo = read_text("/proc/self/mountinfo");
    std::optional<std::string> mount = mountinfo ? first_cgroup2_mount(*mountinfo) : std::nullopt;
    if (!mount) {
      *why =
          "local_legs.cgroup: pod, and this process sees no cgroup v2 hierarchy (no cgroup2 in "
          "/proc/self/mountinfo): mount the host's and name it in local_legs.cgroup_fs";
      return std::nullopt;
    }
    fs_root = *mount;
  }
  std::optional<std::string> proc_cgroup = read_text("/proc/self/cgroup");
  std::optional<std::string> own_path = proc_cgroup ? unified_cgroup_path(*proc_cgroup) : std::nullopt;
  if (!own_path) {
    *why = "local_legs.cgroup: pod, and /proc/self/cgroup names no cgroup v2 (no 0:: line)";
    return std::nullopt;
  }
  std::optional<std::string> own = find_process_cgroup(fs_root, *own_path, ::getpid(), why);
  if (!own) return std::nullopt;
  return pod_cgroup_of(fs_root, *own, why);
}

}  // namespace rdmagw::local
