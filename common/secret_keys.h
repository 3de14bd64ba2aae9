// SPDX-License-Identifier: Apache-2.0
#pragma once
// Pre-shared keys as the process holds them: read once from their files
// (config/key_files.h), shared read-only by every session that proves or
// verifies with them, and wiped from memory when the last holder lets go
// (a reload that rotates them, or the process's end).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rdmagw {

class SecretKeys {
 public:
  SecretKeys() = default;
  SecretKeys(const SecretKeys&) = delete;
  SecretKeys& operator=(const SecretKeys&) = delete;
  ~SecretKeys();

  void add(std::string key) { keys_.push_back(std::move(key)); }
  size_t size() const { return keys_.size(); }
  bool empty() const { return keys_.empty(); }
  // Key `i` (0 proves; every key verifies).
  // Not constant-time: for telling a reload what changed, never for a peer's proof.
  bool operator==(const SecretKeys& other) const { return keys_ == other.keys_; }
  std::span<const uint8_t> key(size_t i) const {
    return {reinterpret_cast<const uint8_t*>(keys_[i].data()), keys_[i].size()};
  }

 private:
  std::vector<std::string> keys_;
};

}  // namespace rdmagw
