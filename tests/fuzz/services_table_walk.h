// SPDX-License-Identifier: Apache-2.0
#pragma once
// For the services harnesses: every record of a table that opened is
// reached, and what a lookup finds has the key it was looked up by (a trap
// otherwise). A table from JSON is also whole: every key is found. One
// from a file need not be (a key its writer left out of an index is only
// not found: the check guards memory and consistency, not completeness).
#include <cstring>

#include "config/services_table.h"

namespace rdmagw {

inline void walk_services_table(const ServiceTable& table, bool whole) {
  size_t endpoints = 0;
  (void)table.api();
  for (const auto& service : table.services()) {
    for (const auto& port : table.ports(service)) {
      for (const auto& ip : table.cluster_ips(service)) {
        const ServiceTable::Port* found = table.find_cluster_ip(ip, port.port);
        // The first Service with that ClusterIP and port answers: one with it.
        if (!found) {
          if (whole) __builtin_trap();
          continue;
        }
        if (found->port != port.port) __builtin_trap();
        bool listed = false;
        for (const auto& other : table.cluster_ips(table.services()[found->service]))
          listed |= std::memcmp(other.bytes, ip.bytes, sizeof(ip.bytes)) == 0;
        if (!listed) __builtin_trap();
      }
      for (size_t r = 0; r < table.ready_count(port); ++r)
        if (ServiceTable::state(table.ready(port, r)) != EndpointState::kReady) __builtin_trap();
      for (const auto& e : table.endpoints(port)) {
        auto found = table.find_endpoint(e.address, e.port);
        if (!found.endpoint) {
          if (whole) __builtin_trap();
          continue;
        }
        if (found.endpoint->address != e.address || found.endpoint->port != e.port ||
            found.port != &table.ports()[found.endpoint->port_index])
          __builtin_trap();
        (void)endpoint_state_name(ServiceTable::state(e));
        (void)table.text(e.pod).size();
        (void)table.node_name(e).size();
        if (const auto* tunnel = table.node_tunnel(e)) (void)service_address::text(*tunnel).size();
        (void)service_address::text(e.address).size();
      }
      endpoints += table.endpoints(port).size();
      (void)table.service_name(port);
    }
  }
  if (endpoints != table.endpoint_count()) __builtin_trap();
  for (const auto& node : table.nodes())
    if (table.text(node.name).empty()) __builtin_trap();  // check() refuses a node without a name
}

}  // namespace rdmagw
