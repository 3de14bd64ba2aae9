#pragma once
// The validated, immutable configuration snapshot. Parsing (config_parser.cc)
// turns YAML into this; the proxy only ever sees a fully validated Config.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/address.h"

namespace rdmagw {

enum class TransportMode { kAuto, kRdma, kTcp };

struct PeerConfig {
  std::string name;
  std::string address;  // numeric IP the peer's tunnel listens on
  uint16_t tcp_port = 0;
  uint16_t rdma_port = 0;
  Endpoint tcp_endpoint;  // address + tcp_port, resolved
};

struct ListenerConfig {
  std::string name;
  Endpoint listen;
  std::string peer;  // name of an entry in Config::peers
  Endpoint target;   // what the peer's rdmagw connects to
};

struct TunnelConfig {
  std::string address = "127.0.0.1";
  uint16_t tcp_port = 7471;
  uint16_t rdma_port = 7472;
  TransportMode transport = TransportMode::kAuto;
  // Extensions beyond the schema (all optional):
  uint32_t buffer_size = 16 * 1024;             // tunnel.buffer_size: max DATA payload per frame
  uint32_t stream_window = 256 * 1024;          // tunnel.stream_window: initial per-stream window
  uint64_t session_budget = 32ull * 1024 * 1024;  // tunnel.session_budget: bytes buffered per session
  uint32_t keepalive_interval_ms = 5000;        // tunnel.keepalive_interval_ms
  uint32_t keepalive_timeout_ms = 15000;        // tunnel.keepalive_timeout_ms
  uint32_t connect_timeout_ms = 3000;           // tunnel.connect_timeout_ms
  uint32_t reconnect_max_ms = 2000;             // tunnel.reconnect_max_ms: backoff ceiling
};

struct Config {
  std::string source_file;
  std::string node;
  std::string admin = "127.0.0.1:9901";
  unsigned workers = 0;  // 0 in YAML is invalid; the parser fills in nproc when absent
  TunnelConfig tunnel;
  std::vector<PeerConfig> peers;
  std::vector<ListenerConfig> listeners;
  std::vector<Endpoint> targets;           // inbound allowlist
  uint32_t shutdown_timeout_ms = 10000;    // shutdown_timeout_ms: drain time on SIGTERM
  std::string log_level = "info";          // log_level: debug | info | warn | error

  const PeerConfig* find_peer(const std::string& name) const {
    for (const auto& p : peers)
      if (p.name == name) return &p;
    return nullptr;
  }
  bool target_allowed(const Endpoint& target) const {
    for (const auto& t : targets)
      if (t == target) return true;
    return false;
  }
};

struct ConfigError {
  std::string file;
  int line = 0;    // 1-based; 0 when the error has no position (file unreadable)
  int column = 0;  // 1-based
  std::string key_path;  // e.g. "listeners[0].target"
  std::string message;
  // "FILE:LINE:COL: key.path: message"
  std::string to_string() const;
};

struct ConfigResult {
  std::shared_ptr<const Config> config;  // set when errors is empty
  std::vector<ConfigError> errors;
};

ConfigResult load_config_file(const std::string& path);
ConfigResult parse_config_text(const std::string& text, const std::string& file_name);

}  // namespace rdmagw
