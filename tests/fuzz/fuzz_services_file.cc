// SPDX-License-Identifier: Apache-2.0
// The services file (config/services_file.h): what rdmagw-k8s writes and a
// sidecar reads. Whatever parses must hold together: each lookup finds what
// the table lists, and the ready list holds the ready endpoints only.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "config/services_file.h"

using namespace rdmagw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::shared_ptr<const ServiceTable> table;
  std::string error;
  if (!parse_services_file(text, &table, &error)) {
    if (error.empty()) __builtin_trap();
    return 0;
  }
  size_t endpoints = 0;
  for (const auto& service : table->services) {
    for (uint32_t p : service.ports) {
      const ServiceTable::Port& port = table->ports.at(p);
      for (uint32_t ip : service.cluster_ips)
        if (table->find_cluster_ip(ip, port.port) != &port) __builtin_trap();
      for (uint32_t r : port.ready)
        if (port.endpoints.at(r).state != EndpointState::kReady) __builtin_trap();
      for (const auto& e : port.endpoints) {
        auto found = table->find_endpoint(e.ip, e.port);
        if (!found.endpoint || found.endpoint->ip != e.ip || found.endpoint->port != e.port) __builtin_trap();
        (void)endpoint_state_name(e.state);
      }
      endpoints += port.endpoints.size();
      (void)table->service_name(port);
    }
  }
  if (endpoints != table->endpoint_count) __builtin_trap();
  return 0;
}
