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

std::shared_ptr<local::EndpointLoad>& ServiceRouter::load(uint32_t ip, uint16_t port) {
  auto& slot = loads_[ServiceTable::key(ip, port)];
  if (!slot) slot = std::make_shared<local::EndpointLoad>();
  return slot;
}

ServiceRouter::Choice ServiceRouter::choose(const sockaddr* destination) {
  Choice choice;
  if (!table_ || destination->sa_family != AF_INET) return choice;
  const auto* in = reinterpret_cast<const sockaddr_in*>(destination);
  uint32_t ip = ntohl(in->sin_addr.s_addr);
  uint16_t port = ntohs(in->sin_port);
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
      endpoint = load(ServiceTable::ipv4(second), second.port)->open < load(ServiceTable::ipv4(first), first.port)->open
                     ? &second
                     : &first;
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
  auto* address = reinterpret_cast<sockaddr_in*>(&choice.address);
  address->sin_family = AF_INET;
  address->sin_addr.s_addr = htonl(ServiceTable::ipv4(*endpoint));
  address->sin_port = htons(endpoint->port);
  choice.lease = local::EndpointLease(load(ServiceTable::ipv4(*endpoint), endpoint->port));
  return choice;
}

void ServiceRouter::count_open(std::unordered_map<uint64_t, uint64_t>* out) const {
  for (const auto& [key, load] : loads_)
    if (load->open) (*out)[key] += load->open;
}

}  // namespace rdmagw
