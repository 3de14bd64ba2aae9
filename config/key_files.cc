// SPDX-License-Identifier: Apache-2.0
#include "config/key_files.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/regular_file.h"
#include "common/unique_fd.h"

namespace rdmagw {

namespace {
bool is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// The one exception to "owner only", as PostgreSQL makes it for its TLS key:
// a file root owns may be readable by a group, when that group is one of
// rdmagw's own. That is how a Kubernetes Secret reaches a container
// (fsGroup: root-owned, mode 0440, the pod's group), and who else is in that
// group is the platform's choice, not any user's. Root takes it only as its
// own non-root group (the sidecar of the local legs runs as uid 0 with the
// pod's group): a root process's supplementary groups prove nothing.
// Writable by the group, or anything for others: never.
bool private_to_our_group(const struct stat& st) {
  if (st.st_uid != 0) return false;
  if ((st.st_mode & (S_IWGRP | S_IXGRP | S_IRWXO)) != 0) return false;
  if (::geteuid() == 0) return st.st_gid != 0 && st.st_gid == ::getegid();
  if (st.st_gid == ::getegid()) return true;
  gid_t groups[256];
  int n = ::getgroups(256, groups);
  for (int i = 0; i < n; ++i)
    if (groups[i] == st.st_gid) return true;
  return false;
}

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}
}  // namespace

namespace {
// The rules every secret file meets (a PSK key, a node's private key).
// Following symlinks is deliberate: Kubernetes mounts a Secret's keys as
// symlinks into a versioned directory, and the target is what must be private.
UniqueFd open_private_file(const std::string& path, uint64_t max_bytes, std::string* error) {
  struct stat st {};
  std::string why;
  // Opened non-blocking, regular files only, within the size cap: a FIFO or
  // a device at the path is refused at once (common/regular_file.h).
  UniqueFd fd = open_regular_file(path, max_bytes, &st, &why);
  if (!fd.valid()) {
    *error = "the key file: " + why;
    return {};
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) && !private_to_our_group(st)) {
    *error = "the key file is accessible by group or others (mode " + octal_mode(st.st_mode) +
             "): chmod 0400 it (a Kubernetes Secret volume: defaultMode: 0400)";
    return {};
  }
  return fd;
}
}  // namespace

bool read_private_key_file(const std::string& path, std::string* pem, std::string* error) {
  UniqueFd fd = open_private_file(path, kMaxPrivateKeyFileBytes, error);
  if (!fd.valid()) return false;
  pem->assign(kMaxPrivateKeyFileBytes + 1, '\0');
  size_t got = 0;
  std::string why;
  if (!read_up_to(fd.get(), reinterpret_cast<uint8_t*>(pem->data()), pem->size(), &got, &why) ||
      got > kMaxPrivateKeyFileBytes) {
    *error = got > kMaxPrivateKeyFileBytes
                 ? "the key file grew past " + std::to_string(kMaxPrivateKeyFileBytes) + " bytes while it was read"
                 : "the key file: " + why;
    OPENSSL_cleanse(pem->data(), pem->size());
    pem->clear();
    return false;
  }
  pem->resize(got);
  return true;
}

bool read_key_file(const std::string& path, std::string* key, std::string* error) {
  UniqueFd fd = open_private_file(path, kMaxKeyFileBytes, error);
  if (!fd.valid()) return false;
  std::string why;
  // One read into a buffer wiped afterwards, so no stray copy of the key
  // stays behind in freed memory.
  std::array<uint8_t, kMaxKeyFileBytes + 1> buffer;
  size_t got = 0;
  if (!read_up_to(fd.get(), buffer.data(), buffer.size(), &got, &why)) {
    *error = "the key file: " + why;
    OPENSSL_cleanse(buffer.data(), buffer.size());
    return false;
  }
  size_t begin = 0, end = got;
  while (begin < end && is_space(buffer[begin])) ++begin;
  while (end > begin && is_space(buffer[end - 1])) --end;
  bool ok = true;
  if (got > kMaxKeyFileBytes) {
    *error = "the key file has more than " + std::to_string(kMaxKeyFileBytes) + " bytes";
    ok = false;
  } else if (end - begin < kMinKeyBytes) {
    *error = "the key has " + std::to_string(end - begin) + " bytes (surrounding whitespace trimmed); at least " +
             std::to_string(kMinKeyBytes) + " are required: make one with `head -c 32 /dev/urandom | base64`";
    ok = false;
  } else {
    key->assign(reinterpret_cast<const char*>(buffer.data() + begin), end - begin);
  }
  OPENSSL_cleanse(buffer.data(), buffer.size());
  return ok;
}

}  // namespace rdmagw
