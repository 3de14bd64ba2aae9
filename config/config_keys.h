// SPDX-License-Identifier: Apache-2.0
#pragma once
// Every key the configuration file may hold, once: the parser accepts these
// and no others (config_parser.cc), and tests/unit/config_keys_test.cc
// checks that each one is classified for reload (config_diff.cc) and has a
// row in docs/configuration.md. A new key added here fails that test until
// both are done. The numeric keys number_keys.h lists come from there,
// classified by it.
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/number_keys.h"

namespace rdmagw::config_keys {

using Keys = std::vector<std::string_view>;

inline const Keys kTop = {"node",      "admin",      "admin_token_file", "workers",    "worker_cpus",
                          "tunnel",    "peers",      "listeners",        "targets",    "shutdown_timeout_ms",
                          "log_level", "access_log", "services",         "local_legs", "metrics"};
inline const Keys kServices = {"file", "direct"};
// `head`, then the numeric keys of `section` (number_keys.h), then `tail`.
inline Keys section_keys(Keys head, std::string_view section, const Keys& tail = {}) {
  for (const NumberKey& k : kNumberKeys)
    if (k.section == section) head.push_back(k.name);
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

inline const Keys kAccessLog = section_keys({"enabled", "path", "format"}, "access_log");
inline const Keys kMetrics = section_keys({}, "metrics");
inline const Keys kLocalLegs = section_keys({"redirect", "cgroup", "cgroup_fs"}, "local_legs");
inline const Keys kTunnel = section_keys({"address", "tcp_port", "rdma_port", "transport"}, "tunnel",
                                         {"tcp_splice", "rdma", "auth", "limits", "peer_cidrs"});
inline const Keys kPeerCidr = {"cidr", "tcp_port", "rdma_port"};  // tunnel.peer_cidrs[] in mapping form
inline const Keys kLimits = section_keys({}, "tunnel.limits");
inline const Keys kAuth = {"mode", "key_files", "encrypt", "ca_files", "cert_file", "key_file"};
inline const Keys kRdma = section_keys({"device"}, "tunnel.rdma", {"max_pinned"});
inline const Keys kPeer = {"name", "address", "tcp_port", "rdma_port", "connect"};
inline const Keys kListener = {"name",           "listen",          "peer",
                               "target",         "routes",          "socket_mode",
                               "clients",        "max_connections", "accepts_per_second",
                               "idle_timeout_ms"};
inline const Keys kRoute = {"match", "peer", "target", "action"};
inline const Keys kTarget = {"target", "peers", "proxy_protocol"};  // targets[] in mapping form

// A mapping of the file and the keys it may hold, by path: "" (the top),
// "tunnel", "tunnel.rdma", "peers[]", "listeners[].routes[]", ...
struct Section {
  std::string_view path;
  const Keys* keys;
};
inline const Section kSections[] = {{"", &kTop},
                                    {"tunnel", &kTunnel},
                                    {"tunnel.peer_cidrs[]", &kPeerCidr},
                                    {"tunnel.limits", &kLimits},
                                    {"tunnel.auth", &kAuth},
                                    {"tunnel.rdma", &kRdma},
                                    {"peers[]", &kPeer},
                                    {"listeners[]", &kListener},
                                    {"listeners[].routes[]", &kRoute},
                                    {"targets[]", &kTarget},
                                    {"access_log", &kAccessLog},
                                    {"services", &kServices},
                                    {"local_legs", &kLocalLegs},
                                    {"metrics", &kMetrics}};

// Every key by its full path ("tunnel.rdma.slab_size", "peers[].name"),
// mappings that are sections themselves included ("tunnel.rdma").
inline std::vector<std::string> all_paths() {
  std::vector<std::string> out;
  for (const Section& s : kSections)
    for (std::string_view key : *s.keys)
      out.push_back(s.path.empty() ? std::string(key) : std::string(s.path) + "." + std::string(key));
  return out;
}

}  // namespace rdmagw::config_keys
