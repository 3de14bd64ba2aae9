// SPDX-License-Identifier: Apache-2.0
#include "config/services_table_builder.h"

#include <bit>
#include <cstring>

#include "common/crc32c.h"

namespace rdmagw {

using namespace services_table;

StringRef ServiceTableBuilder::intern(std::string_view text) {
  // Node names, port names and namespaces repeat: each is stored once.
  auto [it, fresh] = interned_.try_emplace(std::string(text));
  if (fresh) {
    it->second = {static_cast<uint32_t>(strings_.size()), static_cast<uint32_t>(text.size())};
    strings_.append(text);
  }
  return it->second;
}

void ServiceTableBuilder::set_api(bool reachable, std::string_view since, std::string_view error) {
  // The agent's words may quote the server: a control byte becomes a space
  // (the table holds none, services_table.cc).
  auto clean = [](std::string_view text) {
    std::string out(text);
    for (char& c : out)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    return out;
  };
  flags_ = reachable ? kApiReachable : 0;
  since_ = intern(clean(since));
  error_ = intern(clean(error));
}

void ServiceTableBuilder::add_service(std::string_view namespace_name, std::string_view name,
                                      const std::vector<AddressRecord>& cluster_ips) {
  ServiceRecord s{};
  s.namespace_name = intern(namespace_name);
  s.name = intern(name);
  s.first_cluster_ip = static_cast<uint32_t>(cluster_ips_.size());
  s.cluster_ip_count = static_cast<uint32_t>(cluster_ips.size());
  s.first_port = static_cast<uint32_t>(ports_.size());
  cluster_ips_.insert(cluster_ips_.end(), cluster_ips.begin(), cluster_ips.end());
  services_.push_back(s);
}

bool ServiceTableBuilder::add_port(std::string_view name, uint16_t port, std::string* error) {
  ServiceRecord& s = services_.back();
  const auto index = static_cast<uint32_t>(ports_.size());
  for (uint32_t i = 0; i < s.cluster_ip_count; ++i) {
    const AddressRecord& ip = cluster_ips_[s.first_cluster_ip + i];
    auto [it, fresh] = cluster_ip_owner_.emplace(AddressPort{ip, port}, index);
    if (!fresh) {
      const ServiceRecord& owner = services_[ports_[it->second].service];
      auto text = [this](StringRef r) { return strings_.substr(r.offset, r.length); };
      std::string address = service_address::text(ip);
      if (!service_address::is_ipv4(ip)) address = "[" + address + "]";
      *error = address + ":" + std::to_string(port) + " already belongs to " + text(owner.namespace_name) + "/" +
               text(owner.name);
      return false;
    }
  }
  PortRecord p{};
  p.service = static_cast<uint32_t>(services_.size() - 1);
  p.name = intern(name);
  p.port = port;
  p.first_endpoint = static_cast<uint32_t>(endpoints_.size());
  ports_.push_back(p);
  ++s.port_count;
  return true;
}

uint32_t ServiceTableBuilder::node_index(std::string_view node) {
  if (node.empty()) return kNoNode;
  auto [it, fresh] = node_indexes_.try_emplace(std::string(node), static_cast<uint32_t>(nodes_.size()));
  if (fresh) {
    NodeRecord n{};
    n.name = intern(node);
    nodes_.push_back(n);
  }
  return it->second;
}

bool ServiceTableBuilder::add_node_tunnel(std::string_view node, const AddressRecord& tunnel, std::string* error) {
  NodeRecord& n = nodes_[node_index(node)];
  if (n.flags & kNodeHasTunnel) {
    *error = "node " + std::string(node) + " is listed twice";
    return false;
  }
  n.flags |= kNodeHasTunnel;
  n.tunnel = tunnel;
  return true;
}

void ServiceTableBuilder::add_endpoint(const AddressRecord& address, uint16_t port, EndpointState state, bool rdmagw,
                                       std::string_view pod, std::string_view node) {
  EndpointRecord e{};
  e.address = address;
  e.port = port;
  e.state = static_cast<uint8_t>(state);
  e.flags = rdmagw ? kEndpointHasRdmagw : 0;
  e.port_index = static_cast<uint32_t>(ports_.size() - 1);
  e.pod = intern(pod);
  e.node = node_index(node);
  endpoints_.push_back(e);
  ++ports_.back().endpoint_count;
}

namespace {

size_t aligned(size_t n) { return (n + 7) & ~size_t{7}; }

// A power of two above 5/4 of the keys (so at most 80% used): searches
// stay short, there is always a free slot to end one, and the indexes stay
// a small part of the table that every sidecar checks on every change.
std::vector<IndexSlot> make_index(size_t keys) {
  return std::vector<IndexSlot>(keys ? std::bit_ceil(keys + keys / 4 + 1) : 0);
}

// False if the key is there already (the first one stays).
bool insert(std::vector<IndexSlot>& index, const AddressRecord& address, uint16_t port, uint32_t value) {
  size_t mask = index.size() - 1;
  for (size_t i = slot_hash(address, port) & mask;; i = (i + 1) & mask) {
    IndexSlot& slot = index[i];
    if (!slot.used) {
      slot = {address, port, 1, value};
      return true;
    }
    if (slot.port == port && std::memcmp(slot.address.bytes, address.bytes, sizeof(address.bytes)) == 0) return false;
  }
}

}  // namespace

std::shared_ptr<OwnedTableBytes> ServiceTableBuilder::finish() const {
  std::vector<PortRecord> ports = ports_;
  std::vector<uint32_t> ready;
  for (PortRecord& p : ports) {
    p.first_ready = static_cast<uint32_t>(ready.size());
    for (uint32_t e = p.first_endpoint; e < p.first_endpoint + p.endpoint_count; ++e)
      if (endpoints_[e].state == static_cast<uint8_t>(EndpointState::kReady)) ready.push_back(e);
    p.ready_count = static_cast<uint32_t>(ready.size()) - p.first_ready;
  }
  std::vector<IndexSlot> by_cluster_ip = make_index(cluster_ip_owner_.size());
  for (size_t pi = 0; pi < ports.size(); ++pi) {
    const ServiceRecord& s = services_[ports[pi].service];
    for (uint32_t i = 0; i < s.cluster_ip_count; ++i)
      insert(by_cluster_ip, cluster_ips_[s.first_cluster_ip + i], ports[pi].port, static_cast<uint32_t>(pi));
  }
  std::vector<IndexSlot> by_endpoint = make_index(endpoints_.size());
  for (size_t e = 0; e < endpoints_.size(); ++e)
    insert(by_endpoint, endpoints_[e].address, endpoints_[e].port, static_cast<uint32_t>(e));

  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kVersion;
  h.flags = flags_;
  h.api_since = since_;
  h.api_error = error_;
  size_t at = sizeof(Header);
  auto place = [&](SectionIndex which, size_t count, size_t record) {
    at = aligned(at);
    h.sections[which] = {static_cast<uint32_t>(at), static_cast<uint32_t>(count)};
    at += count * record;
  };
  place(kStrings, strings_.size(), 1);
  place(kServices, services_.size(), sizeof(ServiceRecord));
  place(kClusterIps, cluster_ips_.size(), sizeof(AddressRecord));
  place(kPorts, ports.size(), sizeof(PortRecord));
  place(kEndpoints, endpoints_.size(), sizeof(EndpointRecord));
  place(kReady, ready.size(), sizeof(uint32_t));
  place(kClusterIpIndex, by_cluster_ip.size(), sizeof(IndexSlot));
  place(kEndpointIndex, by_endpoint.size(), sizeof(IndexSlot));
  place(kNodes, nodes_.size(), sizeof(NodeRecord));
  h.file_bytes = aligned(at);

  auto bytes = std::make_shared<OwnedTableBytes>(h.file_bytes);
  uint8_t* out = bytes->data();
  std::memset(out, 0, h.file_bytes);
  auto copy = [&](SectionIndex which, const void* data, size_t length) {
    if (length) std::memcpy(out + h.sections[which].offset, data, length);
  };
  copy(kStrings, strings_.data(), strings_.size());
  copy(kServices, services_.data(), services_.size() * sizeof(ServiceRecord));
  copy(kClusterIps, cluster_ips_.data(), cluster_ips_.size() * sizeof(AddressRecord));
  copy(kPorts, ports.data(), ports.size() * sizeof(PortRecord));
  copy(kEndpoints, endpoints_.data(), endpoints_.size() * sizeof(EndpointRecord));
  copy(kReady, ready.data(), ready.size() * sizeof(uint32_t));
  copy(kClusterIpIndex, by_cluster_ip.data(), by_cluster_ip.size() * sizeof(IndexSlot));
  copy(kEndpointIndex, by_endpoint.data(), by_endpoint.size() * sizeof(IndexSlot));
  copy(kNodes, nodes_.data(), nodes_.size() * sizeof(NodeRecord));
  std::memcpy(out, &h, sizeof(h));
  uint32_t sum = crc32c(out + kChecksummedFrom, h.file_bytes - kChecksummedFrom);
  std::memcpy(out + offsetof(Header, checksum), &sum, sizeof(sum));
  return bytes;
}

}  // namespace rdmagw
