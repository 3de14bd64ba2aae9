// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/service_router.h"

#include <arpa/inet.h>

#include <utility>

namespace rdmagw {

void ServiceRouter::set_table(std::shared_ptr<const ServiceTable> table) {
  table_ = std::move(table);
  // Counts no connection holds any more go; the others stay, found again by
  // address if the endpoint is still listed.
  std::erase_if(loads_, [](const auto& entry) { return entry.second->open == 0; });
}

std::shared_ptr<local::EndpointLoad>& ServiceRouter::load(const ServiceTable::Endpoint& endpoint) {
  auto& slot = loads_[ServiceTable::key(endpoint)];
  if (!slot) slot = std::make_shared<local::EndpointLoad>();
  return slot;
}

ServiceRouter::Choice ServiceRouter::choose(const sockaddr* destination) {
  Choice choice;
  services_table::AddressRecord ip{};
  uint16_t port = 0;
  if (!table_ || !service_address::from_sockaddr(destination, &ip, &port)) return choice;
  const ServiceTable::Endpoint* endpoint = nullptr;
  if (const ServiceTable::Port* service = table_->find_cluster_ip(ip, port)) {
    choice.port = service;
    size_t ready = table_->ready_count(*service);
    if (ready == 0) {
      choice.kind = Choice::Kind::kNoEndpoint;
      return choice;
    }
    if (ready == 1) {
      endpoint = &table_->ready(*service, 0);
    } else {
      // Two distinct endpoints, every pair equally likely.
      size_t a = std::uniform_int_distribution<size_t>(0, ready - 1)(random_);
      size_t b = std::uniform_int_distribution<size_t>(0, ready - 2)(random_);
      if (b >= a) ++b;
      const ServiceTable::Endpoint& first = table_->ready(*service, a);
      const ServiceTable::Endpoint& second = table_->ready(*service, b);
      endpoint = load(second)->open < load(first)->open ? &second : &first;
    }
  } else {
    // A headless Service's clients dial an endpoint itself. Not ready or
    // terminating, it still gets the connection: the client chose it, as it
    // would without rdmagw.
    ServiceTable::EndpointRef ref = table_->find_endpoint(ip, port);
    if (!ref.endpoint) return choice;
    choice.port = ref.port;
    endpoint = ref.endpoint;
  }
  choice.kind = Choice::Kind::kEndpoint;
  choice.endpoint = endpoint;
  choice.address_len = service_address::to_sockaddr(endpoint->address, endpoint->port, &choice.address);
  choice.lease = local::EndpointLease(load(*endpoint));
  return choice;
}

void ServiceRouter::count_open(OpenCounts* out) const {
  for (const auto& [key, load] : loads_)
    if (load->open) (*out)[key] += load->open;
}

}  // namespace rdmagw
