// SPDX-License-Identifier: Apache-2.0
#include "tools/rdmagwctl/cli_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>

namespace rdmagw::ctl {

namespace {

constexpr const char* kUsage = R"(Usage: rdmagwctl [OPTIONS] COMMAND [COMMAND OPTIONS]

Talks to a running rdmagw's admin endpoint (docs/admin.md).

Commands:
  status                  process, config, listeners, peers and stream counts (GET /stats)
  ready                   exit 0 if rdmagw is ready (GET /ready answers 200), else 1
                          with the reason (starting, draining): for health checks
  peers                   one row per tunnel session; peers without one say why (GET /peers)
  services                the Kubernetes Services rdmagw knows (services.file): each
                          port's endpoints, their state, which have rdmagw, and
                          how many connections each holds (GET /services)
  config                  the whole configuration in effect, every default filled in,
                          secrets as their files' paths, as JSON (GET /config)
  streams                 the active streams, oldest first (GET /streams)
      --limit N           at most N streams (1..10000; the server's default is 100)
      --offset N          skip the first N
      --all               page through every stream
  top                     live rates per listener and peer, refreshed until Ctrl-C
      --interval SECONDS  time between frames (default 1)
      --count N           stop after N frames
  reload                  re-read the config file (POST /reload); prints the changes,
                          or every error (the running configuration is kept)
  drain                   stop accepting, let open streams finish (POST /drain)
      --wait              poll until no stream is left
      --wait-timeout SECONDS
                          give up waiting after this long (default 60)
  undrain                 accept new connections again after a drain (POST /undrain);
                          says why not (a stop by signal, a port taken meanwhile)
  check CONFIG            validate a config file offline, like rdmagw --check
  help                    show this help

Options:
      --admin HOST:PORT   the admin endpoint ([ADDR]:PORT for IPv6); default:
                          $RDMAGW_ADMIN, else 127.0.0.1:9901
      --json              print the server's JSON instead of tables (status, peers,
                          services, streams, reload, drain, undrain, check)
      --timeout SECONDS   for connecting, and again for the answer (default 5)
      --token-file FILE   the admin token (rdmagw's admin_token_file), sent as
                          Authorization: Bearer; default: $RDMAGW_ADMIN_TOKEN_FILE
  -h, --help              show this help
  -V, --version           show the version

Exit status: 0 success; 1 the admin endpoint could not be reached or answered
an error, a reload or undrain was refused, or drain --wait timed out; 2 bad usage, or
check found the config invalid.
)";

const std::map<std::string, Command>& command_names() {
  static const std::map<std::string, Command> kNames = {
      {"status", Command::kStatus},   {"peers", Command::kPeers},       {"streams", Command::kStreams},
      {"top", Command::kTop},         {"reload", Command::kReload},     {"drain", Command::kDrain},
      {"undrain", Command::kUndrain}, {"check", Command::kCheck},       {"help", Command::kHelp},
      {"ready", Command::kReady},     {"services", Command::kServices}, {"config", Command::kConfig}};
  return kNames;
}

std::string command_word(Command command) {
  for (const auto& [word, c] : command_names())
    if (c == command) return word;
  return "?";
}

// The commands an option belongs to; global options are not listed.
bool option_applies(const std::string& option, Command c) {
  if (option == "--limit" || option == "--offset" || option == "--all") return c == Command::kStreams;
  if (option == "--interval" || option == "--count") return c == Command::kTop;
  if (option == "--wait" || option == "--wait-timeout") return c == Command::kDrain;
  if (option == "--json") return c != Command::kTop && c != Command::kReady;
  return true;
}

std::optional<double> parse_seconds(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v) || v <= 0 || v > 86400 * 365) return std::nullopt;
  return v;
}

std::optional<int64_t> parse_integer(const std::string& text, int64_t min, int64_t max) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > max) return std::nullopt;
  return v;
}

}  // namespace

const char* usage_text() { return kUsage; }

bool parse_cli(const std::vector<std::string>& args, const char* admin_from_environment, CliOptions* out,
               std::string* error) {
  *out = CliOptions{};
  std::optional<Command> command;
  std::vector<std::string> operands;      // after the command
  std::vector<std::string> options_used;  // checked against the command at the end
  std::string admin_text, admin_origin;

  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "-h" || arg == "--help") {
      out->command = Command::kHelp;
      return true;
    }
    if (arg == "-V" || arg == "--version") {
      out->command = Command::kVersion;
      return true;
    }
    if (arg == "--") {
      operands.insert(operands.end(), args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    if (!arg.starts_with("-") || arg == "-") {
      if (command) {
        operands.push_back(arg);
        continue;
      }
      auto found = command_names().find(arg);
      if (found == command_names().end()) {
        *error = "unknown command '" + arg + "'";
        return false;
      }
      command = found->second;
      continue;
    }

    // --name=value or --name value
    std::string name = arg, inline_value;
    bool has_inline_value = false;
    if (size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
      has_inline_value = true;
    }
    auto value = [&](std::string* v) {
      if (has_inline_value) {
        *v = inline_value;
        return true;
      }
      if (i + 1 >= args.size()) {
        *error = name + " needs a value";
        return false;
      }
      *v = args[++i];
      return true;
    };
    auto flag = [&]() {
      if (!has_inline_value) return true;
      *error = name + " takes no value";
      return false;
    };
    std::string v;
    if (name == "--json") {
      if (!flag()) return false;
      out->json = true;
    } else if (name == "--all") {
      if (!flag()) return false;
      out->streams.all = true;
    } else if (name == "--wait") {
      if (!flag()) return false;
      out->drain.wait = true;
    } else if (name == "--admin") {
      if (!value(&admin_text)) return false;
      admin_origin = "--admin";
    } else if (name == "--token-file") {
      if (!value(&out->token_file)) return false;
    } else if (name == "--timeout" || name == "--interval" || name == "--wait-timeout") {
      if (!value(&v)) return false;
      auto seconds = parse_seconds(v);
      if (!seconds) {
        *error = name + " needs a positive number of seconds, not '" + v + "'";
        return false;
      }
      if (name == "--timeout")
        out->timeout_seconds = *seconds;
      else if (name == "--interval")
        out->top.interval_seconds = *seconds;
      else
        out->drain.wait_timeout_seconds = *seconds;
    } else if (name == "--limit" || name == "--offset" || name == "--count") {
      if (!value(&v)) return false;
      int64_t min = name == "--offset" ? 0 : 1, max = name == "--limit" ? 10000 : INT64_MAX;
      auto n = parse_integer(v, min, max);
      if (!n) {
        *error = name + " needs a whole number from " + std::to_string(min) +
                 (max == INT64_MAX ? " up" : " to " + std::to_string(max)) + ", not '" + v + "'";
        return false;
      }
      if (name == "--limit")
        out->streams.limit = *n;
      else if (name == "--offset")
        out->streams.offset = *n;
      else
        out->top.count = *n;
    } else {
      *error = "unknown option '" + arg + "'";
      return false;
    }
    options_used.push_back(name);
  }

  if (!command) {
    *error = "no command given";
    return false;
  }
  out->command = *command;
  for (const auto& option : options_used) {
    if (!option_applies(option, *command)) {
      *error = option + " does not apply to '" + command_word(*command) + "'";
      return false;
    }
  }
  if (*command == Command::kCheck) {
    if (operands.size() != 1) {
      *error = operands.empty() ? "check needs a CONFIG file" : "check takes one CONFIG file";
      return false;
    }
    out->config_file = operands[0];
  } else if (!operands.empty()) {
    *error = "unexpected argument '" + operands[0] + "'";
    return false;
  }

  // check and help never talk to the endpoint: a stale $RDMAGW_ADMIN must
  // not stop them.
  if (*command == Command::kCheck || *command == Command::kHelp) return true;
  if (admin_text.empty() && admin_from_environment && *admin_from_environment) {
    admin_text = admin_from_environment;
    admin_origin = kAdminEnvironment;
  }
  if (admin_text.empty()) admin_text = kDefaultAdmin;
  if (!parse_host_port(admin_text, &out->admin, error)) {
    if (!admin_origin.empty()) *error += " (from " + admin_origin + ")";
    return false;
  }
  return true;
}

}  // namespace rdmagw::ctl
