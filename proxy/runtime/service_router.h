// SPDX-License-Identifier: Apache-2.0
#pragma once
// A worker's view of the Kubernetes Services (`action: service` routes,
// docs/kubernetes.md): the table from the services file, and how many of
// this worker's connections each endpoint holds. A new connection to a
// Service goes to one of its ready endpoints, the less loaded of two picked
// at random (power of two choices): as fair as kube-proxy's random pick
// when connections are short, and it steers away from an endpoint that
// holds many long ones. Not-ready and terminating endpoints get nothing
// new; connections already open stay where they are when the table changes.
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "config/services_file.h"
#include "proxy/local/endpoint_lease.h"

namespace rdmagw {

class ServiceRouter {
 public:
  struct Choice {
    enum class Kind {
      kUnknown,     // not a Service's ClusterIP:port nor an endpoint's address:port: the next route decides
      kNoEndpoint,  // a Service port without a ready endpoint: the connection is refused
      kEndpoint,    // go to `endpoint`
    };
    Kind kind = Kind::kUnknown;
    const ServiceTable::Port* port = nullptr;
    const ServiceTable::Endpoint* endpoint = nullptr;
    sockaddr_storage address{};  // the endpoint's address and port (AF_INET or AF_INET6)
    socklen_t address_len = 0;
    local::EndpointLease lease;  // counts the connection towards the endpoint while it lives
  };

  // A new table (the file changed). Counts of endpoints that stay carry on.
  void set_table(std::shared_ptr<const ServiceTable> table);
  const std::shared_ptr<const ServiceTable>& table() const { return table_; }
  // For a connection whose original destination is `destination`. The
  // choice's pointers are valid until the next set_table().
  Choice choose(const sockaddr* destination);
  // Endpoints with open connections on this worker, by ServiceTable::key.
  using OpenCounts = std::unordered_map<AddressPort, uint64_t, AddressPortHash>;
  void count_open(OpenCounts* out) const;

 private:
  std::shared_ptr<local::EndpointLoad>& load(const ServiceTable::Endpoint& endpoint);

  std::shared_ptr<const ServiceTable> table_;
  std::unordered_map<AddressPort, std::shared_ptr<local::EndpointLoad>, AddressPortHash> loads_;
  std::minstd_rand random_{std::random_device{}()};
};

}  // namespace rdmagw
