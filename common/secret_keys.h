// SPDX-License-Identifier: Apache-2.0
#pragma once
// Pre-shared keys as the process holds them: read once from their files
// (config/key_files.h), shared read-only by every session that proves or
// verifies with them, and wiped from memory when the last holder lets go
// (a reload that rotates them, or the process's end).
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rdmagw {

class SecretKeys {
 public:
  // Names a key without revealing it: HMAC-SHA256 of a fixed label under the
  // key. What a session keeps of the key its peer proved with, so that a
  // reload that removes that key can end the session.
  using KeyId = std::array<uint8_t, 32>;

  SecretKeys() = default;
  SecretKeys(const SecretKeys&) = delete;
  SecretKeys& operator=(const SecretKeys&) = delete;
  ~SecretKeys();

  void add(std::string key);
  size_t size() const { return keys_.size(); }
  bool empty() const { return keys_.empty(); }
  // Not constant-time: for telling a reload what changed, never for a peer's proof.
  bool operator==(const SecretKeys& other) const { return keys_ == other.keys_; }
  // Key `i` (0 proves; every key verifies).
  std::span<const uint8_t> key(size_t i) const {
    return {reinterpret_cast<const uint8_t*>(keys_[i].data()), keys_[i].size()};
  }
  const KeyId& id(size_t i) const { return ids_[i]; }
  // Whether one of these keys is the key `id` names.
  bool holds(const KeyId& id) const;

 private:
  std::vector<std::string> keys_;
  std::vector<KeyId> ids_;  // ids_[i] names keys_[i]
};

}  // namespace rdmagw
