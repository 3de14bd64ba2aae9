// SPDX-License-Identifier: Apache-2.0
#pragma once
// rdmagwctl's command line, parsed apart from running anything so that
// usage errors are decided in one place (and can be tested).
#include <string>
#include <vector>

#include "tools/rdmagwctl/commands.h"
#include "tools/rdmagwctl/http_client.h"

namespace rdmagw::ctl {

enum class Command {
  kHelp,
  kVersion,
  kStatus,
  kPeers,
  kStreams,
  kTop,
  kReload,
  kDrain,
  kUndrain,
  kCheck,
  kReady,
  kServices,
  kConfig
};

inline constexpr const char* kDefaultAdmin = "127.0.0.1:9901";
inline constexpr const char* kAdminEnvironment = "RDMAGW_ADMIN";
inline constexpr const char* kTokenFileEnvironment = "RDMAGW_ADMIN_TOKEN_FILE";

struct CliOptions {
  Command command = Command::kHelp;
  HostPort admin;  // --admin, else $RDMAGW_ADMIN, else kDefaultAdmin
  double timeout_seconds = 5;
  std::string token_file;  // --token-file, else $RDMAGW_ADMIN_TOKEN_FILE (main reads it)
  bool json = false;
  StreamsOptions streams;
  TopOptions top;
  DrainOptions drain;
  std::string config_file;  // check
};

// `args` excludes the program name; `admin_from_environment` is
// $RDMAGW_ADMIN or nullptr. False with *error on a usage error.
bool parse_cli(const std::vector<std::string>& args, const char* admin_from_environment, CliOptions* out,
               std::string* error);

const char* usage_text();

}  // namespace rdmagw::ctl
