// SPDX-License-Identifier: Apache-2.0
// check CONFIG: validates a configuration offline with rdmagw's own parser,
// so it accepts and rejects exactly what `rdmagw --check` does.
#include <cstdio>

#include "config/config.h"
#include "tools/rdmagwctl/commands.h"
#include "tools/rdmagwctl/json.h"
#include "tools/rdmagwctl/terminal_text.h"

namespace rdmagw::ctl {

namespace {

std::string errors_as_json(const std::string& file, const ConfigResult& result) {
  std::string out = "{\n  \"file\": " + json_quote(file) + ",\n  \"ok\": " + (result.errors.empty() ? "true" : "false");
  out += ",\n  \"errors\": [";
  for (size_t i = 0; i < result.errors.size(); ++i) {
    const ConfigError& e = result.errors[i];
    out += std::string(i ? "," : "") + "\n    {\"file\": " + json_quote(e.file) +
           ", \"line\": " + std::to_string(e.line) + ", \"column\": " + std::to_string(e.column) +
           ", \"key\": " + json_quote(e.key_path) + ", \"message\": " + json_quote(e.message) + "}";
  }
  out += result.errors.empty() ? "]\n}" : "\n  ]\n}";
  return out;
}

}  // namespace

int run_check(const std::string& config_file, bool json) {
  ConfigResult result = load_config_file(config_file);
  if (json) {
    printf("%s\n", errors_as_json(config_file, result).c_str());
    return result.errors.empty() ? kExitOk : kExitUsage;
  }
  if (!result.errors.empty()) {
    // Errors quote the file, which may come from anywhere: escaped like answers.
    for (const auto& e : result.errors) fprintf(stderr, "%s\n", terminal_text(e.to_string()).c_str());
    print_error(std::to_string(result.errors.size()) + (result.errors.size() == 1 ? " error" : " errors") + " in " +
                config_file);
    return kExitUsage;
  }
  const Config& config = *result.config;
  printf("%s: ok (%zu listeners, %zu peers, %zu targets)\n", terminal_text(config_file).c_str(),
         config.listeners.size(), config.peers.size(), config.targets.size());
  return kExitOk;
}

}  // namespace rdmagw::ctl
