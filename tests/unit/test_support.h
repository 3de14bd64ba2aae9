// SPDX-License-Identifier: Apache-2.0
#pragma once
// Small helpers the unit tests share, so that each is written once: files
// and temporary directories, text searches, configuration parses, IPv4
// addresses.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "config/config.h"

namespace rdmagw::test {

// The whole of a file, bytes as they are; fails the test if it cannot be
// opened.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  INFO(path);
  REQUIRE(in);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A file of the source tree ("docs/configuration.md").
inline std::string read_source_file(const std::string& relative) {
  return read_file(std::string(RDMAGW_SOURCE_DIR) + "/" + relative);
}

// A fresh directory under /tmp, removed with what it holds when this goes.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix = "rdmagw-test") {
    std::string pattern = "/tmp/" + prefix + "-XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A parse's errors, one per line as --check prints them.
inline std::string error_lines(const ConfigResult& result) {
  std::string out;
  for (const auto& e : result.errors) out += e.to_string() + "\n";
  return out;
}

// A configuration that must parse; fails the test with its errors if not.
inline std::shared_ptr<const Config> parse_config_ok(const std::string& text, const std::string& file = "ok.yaml") {
  ConfigResult r = parse_config_text(text, file);
  INFO("input:\n" << text << "errors:\n" << error_lines(r));
  REQUIRE(r.errors.empty());
  REQUIRE(r.config != nullptr);
  return r.config;
}

// "10.0.0.1" in host order.
inline uint32_t ipv4(const char* text) {
  in_addr a{};
  REQUIRE(inet_pton(AF_INET, text, &a) == 1);
  return ntohl(a.s_addr);
}

}  // namespace rdmagw::test
