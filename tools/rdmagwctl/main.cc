// SPDX-License-Identifier: Apache-2.0
// rdmagwctl: the command-line client of rdmagw's admin endpoint.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "common/version.h"
#include "config/key_files.h"
#include "tools/rdmagwctl/cli_options.h"
#include "tools/rdmagwctl/commands.h"

namespace rdmagw::ctl {
namespace {

int run(const CliOptions& options) {
  if (options.command == Command::kCheck) return run_check(options.config_file, options.json);
  std::string token;
  if (!options.token_file.empty()) {
    std::string error;
    // The same file rdmagw reads, held to the same rules (private, >= 32 bytes).
    if (!read_key_file(options.token_file, &token, &error)) {
      print_error("admin token " + options.token_file + ": " + error);
      return kExitUsage;
    }
  }
  CommandContext ctx{AdminClient(options.admin, options.timeout_seconds, std::move(token)), options.json};
  switch (options.command) {
    case Command::kStatus:
      return run_status(ctx);
    case Command::kPeers:
      return run_peers(ctx);
    case Command::kStreams:
      return run_streams(ctx, options.streams);
    case Command::kServices:
      return run_services(ctx);
    case Command::kConfig:
      return run_config(ctx);
    case Command::kTop:
      return run_top(ctx, options.top);
    case Command::kReload:
      return run_reload(ctx);
    case Command::kReady:
      return run_ready(ctx);
    case Command::kDrain:
      return run_drain(ctx, options.drain);
    case Command::kUndrain:
      return run_undrain(ctx);
    case Command::kHelp:
    case Command::kVersion:
    case Command::kCheck:
      break;  // handled in main
  }
  return kExitUsage;
}

}  // namespace
}  // namespace rdmagw::ctl

int main(int argc, char** argv) {
  using namespace rdmagw::ctl;
  std::vector<std::string> args(argv + 1, argv + argc);
  CliOptions options;
  std::string error;
  if (!parse_cli(args, getenv(kAdminEnvironment), &options, &error)) {
    print_error(error);
    fputs("(rdmagwctl --help shows the usage)\n", stderr);
    return kExitUsage;
  }
  if (options.token_file.empty() && getenv(kTokenFileEnvironment)) options.token_file = getenv(kTokenFileEnvironment);
  if (options.command == Command::kHelp) {
    fputs(usage_text(), stdout);
    return kExitOk;
  }
  if (options.command == Command::kVersion) {
    printf("%s\n", rdmagw::version_line("rdmagwctl").c_str());
    return kExitOk;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    print_error(std::string("fatal: ") + e.what());
    return kExitFailure;
  }
}
