// SPDX-License-Identifier: Apache-2.0
#pragma once
// Kubernetes Services with their ports and endpoints, as one immutable block
// of bytes in the services table's layout (services_table_format.h), looked
// up in place: a destination (a ClusterIP:port, or an endpoint's
// address:port as a headless Service's clients dial it) in constant time.
// The bytes are a mapping of the table file rdmagw-k8s writes (shared by
// every sidecar of the node), or a buffer built from the services file's
// JSON (services_file.h); either way they are checked whole before use, so
// that every reference in them stays inside them.
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "config/services_table_format.h"

namespace rdmagw {

enum class EndpointState : uint8_t { kReady, kTerminating, kNotReady };
std::string_view endpoint_state_name(EndpointState state);  // "ready", "terminating", "not-ready"
// Addresses as the table holds them: 16 bytes, IPv4 as ::ffff:a.b.c.d.
namespace service_address {
using Address = services_table::AddressRecord;
bool is_ipv4(const Address& a);      // ::ffff:a.b.c.d
uint32_t ipv4(const Address& a);     // host byte order; with is_ipv4()
Address from_ipv4(uint32_t ip);      // host byte order
std::string text(const Address& a);  // "10.96.0.10", "fd00::a"
// From either family's text (no brackets, no zone); false if it is neither.
bool parse(const char* text, Address* out);
// Why an address is none a Service or pod holds ("loopback", "multicast
// (224.0.0.0/4)", ...), or null if it may be one: the rule for the services
// file and the table alike. Never an address that would land on this host
// whatever was meant (rdmagw's own admin endpoint among others). IPv4:
// 0.0.0.0/8, loopback, link-local, multicast, broadcast; IPv6: unspecified,
// loopback, link-local, multicast.
const char* refused(const Address& a);
// A socket address's (AF_INET or AF_INET6; a v4-mapped IPv6 one as the
// IPv4 address it holds). False for any other family.
bool from_sockaddr(const sockaddr* sa, Address* address, uint16_t* port);
// The socket address to connect to: AF_INET for an IPv4 address, AF_INET6
// otherwise. Returns its length.
socklen_t to_sockaddr(const Address& a, uint16_t port, sockaddr_storage* out);
}  // namespace service_address

// An address and port as a key (an endpoint's streams, a ClusterIP:port's
// Service).
struct AddressPort {
  services_table::AddressRecord address{};
  uint16_t port = 0;
  bool operator==(const AddressPort&) const = default;
};
struct AddressPortHash {
  size_t operator()(const AddressPort& k) const { return services_table::slot_hash(k.address, k.port); }
};

// Kubernetes names are at most 253 bytes; anything longer is not one.
inline constexpr size_t kMaxServiceNameBytes = 253;
// api.since and api.error: the agent's words (an error can quote the
// server), cut to this many bytes and "..." rather than refused.
inline constexpr size_t kMaxApiTextBytes = 1024;

// Where a table's bytes live; they outlive every view of them.
class TableBytes {
 public:
  virtual ~TableBytes() = default;
  virtual const uint8_t* data() const = 0;
  virtual size_t size() const = 0;
};

class ServiceTable {
 public:
  using Service = services_table::ServiceRecord;
  using Port = services_table::PortRecord;
  using Endpoint = services_table::EndpointRecord;
  using Node = services_table::NodeRecord;
  // Whether the agent reached the API server when it wrote the table.
  struct Api {
    bool reachable = false;
    std::string since;
    std::string error;
  };

  // Checks `bytes` whole (layout, checksum, every reference and index,
  // every address and name as the services file's rules have them). Null
  // and *error naming the part at fault when they do not hold together.
  static std::shared_ptr<const ServiceTable> open(std::shared_ptr<const TableBytes> bytes, std::string* error);

  Api api() const;
  std::span<const Service> services() const { return services_; }
  std::span<const Port> ports() const { return ports_; }
  size_t endpoint_count() const { return endpoints_.size(); }

  std::string_view text(services_table::StringRef ref) const {
    return {reinterpret_cast<const char*>(strings_.data()) + ref.offset, ref.length};
  }
  std::span<const services_table::AddressRecord> cluster_ips(const Service& s) const {
    return cluster_ips_.subspan(s.first_cluster_ip, s.cluster_ip_count);
  }
  std::span<const Port> ports(const Service& s) const { return ports_.subspan(s.first_port, s.port_count); }
  std::span<const Endpoint> endpoints(const Port& p) const {
    return endpoints_.subspan(p.first_endpoint, p.endpoint_count);
  }
  // The port's ready endpoints (the ones new streams may go to).
  size_t ready_count(const Port& p) const { return p.ready_count; }
  const Endpoint& ready(const Port& p, size_t i) const { return endpoints_[ready_[p.first_ready + i]]; }

  std::span<const Node> nodes() const { return nodes_; }
  // The node an endpoint names (null: none), its name ("" for none), and
  // where the node's node-mode rdmagw accepts tunnels (null: it has none).
  const Node* node(const Endpoint& e) const;
  std::string_view node_name(const Endpoint& e) const;
  const services_table::AddressRecord* node_tunnel(const Endpoint& e) const;

  // A Service's ClusterIP and port.
  const Port* find_cluster_ip(const services_table::AddressRecord& ip, uint16_t port) const;
  // An endpoint by its address and target port (a headless Service's
  // clients connect to it directly): the first Service port listing it.
  struct EndpointRef {
    const Port* port = nullptr;
    const Endpoint* endpoint = nullptr;
  };
  EndpointRef find_endpoint(const services_table::AddressRecord& ip, uint16_t port) const;

  // "namespace/name" of a port's Service.
  std::string service_name(const Port& port) const;

  // How a worker counts an endpoint's streams.
  static AddressPort key(const Endpoint& e) { return {e.address, e.port}; }

  // An endpoint's fields.
  static EndpointState state(const Endpoint& e) { return static_cast<EndpointState>(e.state); }
  static bool has_rdmagw(const Endpoint& e) { return (e.flags & services_table::kEndpointHasRdmagw) != 0; }

 private:
  explicit ServiceTable(std::shared_ptr<const TableBytes> bytes) : bytes_(std::move(bytes)) {}
  bool check(std::string* error);
  const services_table::IndexSlot* find(std::span<const services_table::IndexSlot> index,
                                        const services_table::AddressRecord& address, uint16_t port) const;

  std::shared_ptr<const TableBytes> bytes_;
  const services_table::Header* header_ = nullptr;
  std::span<const uint8_t> strings_;
  std::span<const Service> services_;
  std::span<const services_table::AddressRecord> cluster_ips_;
  std::span<const Port> ports_;
  std::span<const Endpoint> endpoints_;
  std::span<const uint32_t> ready_;
  std::span<const services_table::IndexSlot> by_cluster_ip_;
  std::span<const services_table::IndexSlot> by_endpoint_;
  std::span<const Node> nodes_;
};

}  // namespace rdmagw
