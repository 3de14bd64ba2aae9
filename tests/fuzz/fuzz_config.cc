// SPDX-License-Identifier: Apache-2.0
// The configuration parser and checker (config/) on arbitrary text, and the
// reload diff of whatever it accepts against a fixed running configuration.
// Key files are not read (parse_config_text's default): the fuzzer must not
// open paths the input names.
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/config.h"
#include "config/config_diff.h"

using namespace rdmagw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::shared_ptr<const Config> running =
      parse_config_text(
          "node: a\ntunnel: {address: 127.0.0.1, tcp_port: 7471}\npeers: [{name: b, address: 127.0.0.2, tcp_port: "
          "7481}]\n"
          "listeners: [{name: l, listen: 'tcp:127.0.0.1:6380', peer: b, target: 'tcp:127.0.0.1:6379'}]\n",
          "running.yaml")
          .config;
  ConfigResult result = parse_config_text(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
  if (result.config == nullptr && result.errors.empty()) __builtin_trap();  // refused, yet no reason given
  for (const auto& e : result.errors) (void)e.to_string();
  if (result.config && running) {
    restart_only_changes(*running, *result.config);
    describe_changes(*running, *result.config);
  }
  return 0;
}
