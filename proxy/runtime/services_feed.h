// SPDX-License-Identifier: Apache-2.0
#pragma once
// The services file (services.file), watched by the main thread: read again
// whenever it is replaced or changed (its device, inode, size or mtime
// differ from the last read), parsed, and a table that parses is handed to
// every worker. A file that is missing or does not parse changes nothing:
// the last table stays in use, and the error is logged, counted and shown
// by the admin endpoint. rdmagw-k8s replaces the file by rename, so a read
// never sees half of it.
#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "config/services_file.h"

namespace rdmagw {

class ServicesFeed {
 public:
  // What the admin endpoint shows (any thread).
  struct State {
    std::string file;                           // empty: services.file is not set
    std::shared_ptr<const ServiceTable> table;  // in use; null before the first good read
    std::string table_file;                     // the file `table` was read from (a reload may have moved on)
    double loaded_unix = 0;                     // when `table` was read
    std::string error;                          // why the last read failed (empty: it did not)
    uint64_t loads = 0;                         // good reads
    uint64_t failures = 0;                      // failed reads (missing, unreadable, malformed)
  };

  // The file to watch (at start and on each reload). A new path is read at
  // the next poll(); the table in use stays until then.
  void watch(const std::string& path);
  // True with *table when a new table was read (null when services.file was
  // removed from the configuration). The main thread calls it every 100 ms,
  // a reload once more at once; the caller makes them one at a time (the
  // runtime holds a lock across a poll and its posting of the table).
  bool poll(std::shared_ptr<const ServiceTable>* table);
  State state() const;

 private:
  struct Identity {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = -1;
    timespec mtime{};
    // A chmod or chown changes only this: a file refused for its owner or
    // mode is read again once they are fixed.
    timespec ctime{};
    bool operator==(const Identity& o) const {
      return dev == o.dev && ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
             mtime.tv_nsec == o.mtime.tv_nsec && ctime.tv_sec == o.ctime.tv_sec && ctime.tv_nsec == o.ctime.tv_nsec;
    }
  };
  void fail(const std::string& path, std::string error);

  // poll()'s own (its callers one at a time):
  std::string polled_file_;  // the path the last poll() looked at
  bool seen_ = false;        // seen_identity_ holds the identity of its last read (good or not)
  Identity seen_identity_{};
  std::string path_problem_;  // why the way to the file was not trusted at its last read ("" if it was)
  mutable std::mutex mu_;     // guards state_
  State state_;
};

}  // namespace rdmagw
