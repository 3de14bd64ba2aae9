// SPDX-License-Identifier: Apache-2.0
#include "common/trusted_path.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rdmagw {

namespace {

bool trusted_owner(uid_t uid) { return uid == 0 || uid == ::geteuid(); }

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Each prefix of `path` ("/a", "/a/b", ... the last one excluded: the
// file), checked without following its last component.
std::string components_problem(const std::string& path) {
  for (size_t end = path.find('/', 1); end != std::string::npos; end = path.find('/', end + 1)) {
    std::string prefix = path.substr(0, end);
    struct stat st {};
    if (::lstat(prefix.c_str(), &st) != 0) return prefix + ": " + strerror(errno);
    if (S_ISLNK(st.st_mode)) {
      if (!trusted_owner(st.st_uid))
        return prefix + " is a symlink owned by uid " + std::to_string(st.st_uid) +
               ", neither root nor this process's user: whoever placed it decides what is read";
      continue;
    }
    if (!S_ISDIR(st.st_mode)) return prefix + " is not a directory";
    if (!trusted_owner(st.st_uid))
      return "directory " + prefix + " is owned by uid " + std::to_string(st.st_uid) +
             ", neither root nor this process's user: its owner could replace the file";
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
      return "directory " + prefix + " is writable by group or others (mode " + octal_mode(st.st_mode) +
             "), who could replace the file: chmod go-w it";
  }
  return {};
}

}  // namespace

std::string trusted_path_problem(const std::string& path) {
  if (path.empty() || path.front() != '/') return path + ": not an absolute path";
  // The last component: a symlink there is checked like any other.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode) && !trusted_owner(st.st_uid))
    return path + " is a symlink owned by uid " + std::to_string(st.st_uid) +
           ", neither root nor this process's user: whoever placed it decides what is read";
  if (std::string why = components_problem(path); !why.empty()) return why;
  // Where symlinks lead: the directories there must be trusted too.
  char resolved[PATH_MAX];
  if (!::realpath(path.c_str(), resolved)) return path + ": " + strerror(errno);
  if (path != resolved) return components_problem(resolved);
  return {};
}

std::string trusted_file_problem(const std::string& path, const struct stat& st) {
  if (!trusted_owner(st.st_uid))
    return path + " is owned by uid " + std::to_string(st.st_uid) +
           ", neither root nor this process's user: chown it to the user that writes it";
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return path + " is writable by group or others (mode " + octal_mode(st.st_mode) + "): chmod go-w it";
  return {};
}

}  // namespace rdmagw
