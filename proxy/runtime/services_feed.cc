// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/services_feed.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "common/log.h"
#include "common/regular_file.h"
#include "common/trusted_path.h"

namespace rdmagw {

namespace {

// This thread's CPU time: what reading a file cost, whatever else runs.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A services table file mapped read-only: its pages are the page cache's,
// shared with every other sidecar that maps the same file. rdmagw-k8s
// replaces the file by rename, so the mapping keeps the bytes it was
// checked with; a file rewritten in place instead (not the agent's way)
// could change under it.
class MappedTableBytes final : public TableBytes {
 public:
  static std::shared_ptr<const MappedTableBytes> map(int fd, size_t size, std::string* error) {
    // Populated at once: the check reads every page next, and one call
    // maps them cheaper than a fault each.
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      *error = std::string("mmap: ") + strerror(errno);
      return nullptr;
    }
    return std::shared_ptr<const MappedTableBytes>(new MappedTableBytes(static_cast<const uint8_t*>(p), size));
  }
  ~MappedTableBytes() override { ::munmap(const_cast<uint8_t*>(data_), size_); }
  const uint8_t* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  MappedTableBytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const uint8_t* data_;
  size_t size_;
};

// The file itself (its path was checked): a regular file within the size
// limit that root or this user alone can have written; a services table
// (by its first bytes) mapped and checked, else the JSON services file
// parsed.
std::shared_ptr<const ServiceTable> load_trusted(const std::string& path, const char** format, std::string* error) {
  struct stat st {};
  UniqueFd fd = open_regular_file(path, kMaxServicesFileBytes, &st, error);
  if (!fd.valid()) return nullptr;
  if (std::string why = trusted_file_problem(path, st); !why.empty()) {
    *error = "not trusted: " + why;
    return nullptr;
  }
  char magic[sizeof(services_table::kMagic)] = {};
  ssize_t got = ::pread(fd.get(), magic, sizeof(magic), 0);
  if (got == static_cast<ssize_t>(sizeof(magic)) && std::memcmp(magic, services_table::kMagic, sizeof(magic)) == 0) {
    *format = "table";
    auto bytes = MappedTableBytes::map(fd.get(), static_cast<size_t>(st.st_size), error);
    return bytes ? ServiceTable::open(std::move(bytes), error) : nullptr;
  }
  *format = "json";
  std::string text;
  std::shared_ptr<const ServiceTable> parsed;
  if (!read_opened_file(fd.get(), st, kMaxServicesFileBytes, &text, error) ||
      !parse_services_file(text, &parsed, error))
    return nullptr;
  return parsed;
}

}  // namespace

void ServicesFeed::watch(const std::string& path) {
  std::lock_guard lock(mu_);
  if (path == state_.file) return;
  state_.file = path;
  state_.error.clear();
}

bool ServicesFeed::poll(std::shared_ptr<const ServiceTable>* table) {
  std::string path;
  {
    std::lock_guard lock(mu_);
    path = state_.file;
  }
  bool path_changed = path != polled_file_;
  if (path_changed) {
    polled_file_ = path;
    seen_ = false;
    path_problem_.clear();
  }
  if (path.empty()) {
    if (!path_changed) return false;
    std::lock_guard lock(mu_);
    if (!state_.table) return false;
    state_.table.reset();  // no services.file any more: `action: service` routes are gone too
    state_.table_file.clear();
    *table = nullptr;
    return true;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int error = errno;
    // Said once, until the file is back.
    if (seen_ || path_changed) fail(path, std::string("stat: ") + strerror(error));
    seen_ = false;
    return false;
  }
  Identity now{st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
  // The file decides where every Service connection goes, and whether it is
  // tunnelled: read only if root or this user alone can have written it
  // (common/trusted_path.h). A file refused for the way to it (a directory
  // others may write, a symlink another user owns) is not changed by fixing
  // that: the way is looked at again on every poll, quietly while the
  // answer stays the same.
  if (seen_ && now == seen_identity_ && (path_problem_.empty() || trusted_path_problem(path) == path_problem_))
    return false;
  seen_ = true;
  seen_identity_ = now;
  path_problem_ = trusted_path_problem(path);
  if (!path_problem_.empty()) {
    fail(path, "not trusted: " + path_problem_);
    return false;
  }
  std::string error;
  const char* format = "json";
  const double cpu_before = thread_cpu_seconds();
  std::shared_ptr<const ServiceTable> parsed = load_trusted(path, &format, &error);
  const double cpu_used = thread_cpu_seconds() - cpu_before;
  if (!parsed) {
    fail(path, std::move(error));
    return false;
  }
  bool was_reachable = false, had_table = false;
  {
    std::lock_guard lock(mu_);
    had_table = state_.table != nullptr;
    was_reachable = had_table && state_.table->api().reachable;
    state_.table = parsed;
    state_.table_file = path;
    state_.loaded_unix = unix_seconds();
    state_.error.clear();
    ++state_.loads;
  }
  const ServiceTable::Api api = parsed->api();
  log::info("services_loaded")
      .kv("file", path)
      .kv("format", format)
      .kv("services", parsed->services().size())
      .kv("endpoints", parsed->endpoint_count())
      .kv("api", api.reachable ? "reachable" : "unreachable")
      .kv("cpu_us", static_cast<uint64_t>(cpu_used * 1e6));
  // The agent lost (or found again) the API server: the table is what it
  // knew last, and stays in use either way.
  if (!api.reachable && (was_reachable || !had_table))
    log::warn("services_api_unreachable")
        .kv("file", path)
        .kv("since", api.since)
        .kv("error", api.error)
        .kv("effect", "the last known Services and endpoints stay in use");
  else if (api.reachable && had_table && !was_reachable)
    log::info("services_api_reachable").kv("file", path).kv("since", api.since);
  *table = std::move(parsed);
  return true;
}

void ServicesFeed::fail(const std::string& path, std::string error) {
  std::string kept;
  {
    std::lock_guard lock(mu_);
    state_.error = error;
    ++state_.failures;
    if (!state_.table)
      kept = "none (action: service routes pass connections on to the next route)";
    else if (state_.table_file == path)
      kept = "the last table read";
    else
      kept = "the table read from " + state_.table_file;
  }
  log::error("services_load_failed").kv("file", path).kv("reason", error).kv("kept", kept);
}

ServicesFeed::State ServicesFeed::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

}  // namespace rdmagw
