// SPDX-License-Identifier: Apache-2.0
#include "common/regular_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rdmagw {

namespace {
const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  return "not a plain file";
}
}  // namespace

UniqueFd open_regular_file(const std::string& path, uint64_t max_bytes, struct stat* st, std::string* error) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) {
    *error = std::string("cannot open: ") + std::strerror(errno);
    return {};
  }
  if (::fstat(fd.get(), st) != 0) {
    *error = std::string("cannot stat: ") + std::strerror(errno);
    return {};
  }
  if (!S_ISREG(st->st_mode)) {
    *error = std::string("not a regular file (") + kind_of(st->st_mode) + ")";
    return {};
  }
  if (static_cast<uint64_t>(st->st_size) > max_bytes) {
    *error =
        "the file has " + std::to_string(st->st_size) + " bytes; at most " + std::to_string(max_bytes) + " are read";
    return {};
  }
  return fd;
}

bool read_up_to(int fd, uint8_t* buffer, size_t capacity, size_t* got, std::string* error) {
  *got = 0;
  while (*got < capacity) {
    ssize_t n = ::read(fd, buffer + *got, capacity - *got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = std::string("cannot read: ") + std::strerror(errno);
      return false;
    }
    if (n == 0) break;
    *got += static_cast<size_t>(n);
  }
  return true;
}

bool read_regular_file(const std::string& path, uint64_t max_bytes, std::string* out, std::string* error) {
  struct stat st {};
  UniqueFd fd = open_regular_file(path, max_bytes, &st, error);
  return fd.valid() && read_opened_file(fd.get(), st, max_bytes, out, error);
}

bool read_opened_file(int fd, const struct stat& st, uint64_t max_bytes, std::string* out, std::string* error) {
  std::string text(static_cast<size_t>(st.st_size) + 1, '\0');  // one more: growth since the stat shows
  size_t got = 0;
  if (!read_up_to(fd, reinterpret_cast<uint8_t*>(text.data()), text.size(), &got, error)) return false;
  if (got > static_cast<size_t>(st.st_size)) {
    // It grew while we read: read on, within the limit.
    text.resize(static_cast<size_t>(max_bytes) + 1);
    size_t more = 0;
    if (got < text.size() &&
        !read_up_to(fd, reinterpret_cast<uint8_t*>(text.data()) + got, text.size() - got, &more, error))
      return false;
    got += more;
    if (got > max_bytes) {
      *error = "the file grew past " + std::to_string(max_bytes) + " bytes while it was read";
      return false;
    }
  }
  text.resize(got);
  *out = std::move(text);
  return true;
}

}  // namespace rdmagw
