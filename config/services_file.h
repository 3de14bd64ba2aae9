// SPDX-License-Identifier: Apache-2.0
#pragma once
// The services file that rdmagw-k8s writes (docs/kubernetes.md): Kubernetes
// Services with their ports and endpoints, parsed into an immutable table in
// which a destination (a ClusterIP:port, or an endpoint's address:port as a
// headless Service's clients dial it) is looked up in constant time.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rdmagw {

// Larger files are refused unread: 10,000 Services of 10 endpoints make
// about 3 MB.
inline constexpr size_t kMaxServicesFileBytes = 64u << 20;

enum class EndpointState : uint8_t { kReady, kTerminating, kNotReady };
std::string_view endpoint_state_name(EndpointState state);  // "ready", "terminating", "not-ready"
// An IPv4 address in host byte order as the file writes it ("10.96.0.10").
std::string ipv4_text(uint32_t ip);

struct ServiceTable {
  struct Endpoint {
    uint32_t ip = 0;  // IPv4, host byte order
    uint16_t port = 0;
    EndpointState state = EndpointState::kNotReady;
    bool rdmagw = false;  // its pod has a sidecar, which accepts tunnels at ip
    std::string pod;
    std::string node;
  };
  struct Port {
    uint32_t service = 0;  // index into services
    std::string name;
    uint16_t port = 0;
    std::vector<Endpoint> endpoints;
    std::vector<uint32_t> ready;  // indexes into endpoints: the ones new streams may go to
  };
  struct Service {
    std::string namespace_name;
    std::string name;
    std::vector<uint32_t> cluster_ips;
    std::vector<uint32_t> ports;  // indexes into ports
  };
  // Whether the agent reached the API server when it wrote the file.
  struct Api {
    bool reachable = false;
    std::string since;
    std::string error;
  };

  Api api;
  std::vector<Service> services;
  std::vector<Port> ports;
  size_t endpoint_count = 0;

  // A Service's ClusterIP and port.
  const Port* find_cluster_ip(uint32_t ip, uint16_t port) const;
  // An endpoint by its address and target port (a headless Service's
  // clients connect to it directly): the first Service port listing it.
  struct EndpointRef {
    const Port* port = nullptr;
    const Endpoint* endpoint = nullptr;
  };
  EndpointRef find_endpoint(uint32_t ip, uint16_t port) const;

  // "namespace/name" of a port's Service.
  std::string service_name(const Port& port) const;

  // One number for an address and port (the lookups' key, and how a
  // worker counts an endpoint's streams).
  static uint64_t key(uint32_t ip, uint16_t port) { return (uint64_t{ip} << 16) | port; }

 private:
  friend bool parse_services_file(std::string_view, std::shared_ptr<const ServiceTable>*, std::string*);
  std::unordered_map<uint64_t, uint32_t> by_cluster_ip_;                     // -> port index
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> by_endpoint_;  // -> port, endpoint index
};

// Parses the file's content. False with *error naming the field
// ("services[2].ports[0].endpoints[1].address: ...") on anything malformed;
// fields it does not know are ignored (a newer agent may add some), but a
// format other than "rdmagw-services/1" is refused.
bool parse_services_file(std::string_view text, std::shared_ptr<const ServiceTable>* table, std::string* error);

}  // namespace rdmagw
