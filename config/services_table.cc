// SPDX-License-Identifier: Apache-2.0
#include "config/services_table.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <tuple>

#include "common/crc32c.h"

namespace rdmagw {

using namespace services_table;

namespace {

// api.since and api.error as written: cut, with "...".
constexpr size_t kMaxApiTextWritten = kMaxApiTextBytes + 3;

constexpr uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

bool fail(std::string* error, std::string why) {
  *error = std::move(why);
  return false;
}

std::string at(const char* what, size_t index) { return std::string(what) + "[" + std::to_string(index) + "]"; }

// Where a value is ("endpoints[7].pod"), made into text only for an error:
// the check visits every record of a table on each change.
struct Where {
  const char* kind;  // null: `field` alone
  size_t index = 0;
  const char* field = "";
  size_t sub = SIZE_MAX;  // an index after `field` ("services[0].cluster_ips[1]")
  std::string text() const {
    std::string out = kind ? at(kind, index) + field : std::string(field);
    if (sub != SIZE_MAX) out += "[" + std::to_string(sub) + "]";
    return out;
  }
};

// service_address::refused() for IPv4 (host byte order).
const char* refused_service_ipv4(uint32_t ip) {
  return (ip >> 24) == 127      ? "loopback"
         : (ip >> 24) == 0      ? "unspecified (0.0.0.0/8)"
         : (ip >> 16) == 0xA9FE ? "link-local (169.254.0.0/16)"
         : (ip >> 28) == 0xE    ? "multicast (224.0.0.0/4)"
         : ip == 0xFFFFFFFF     ? "broadcast"
                                : nullptr;
}

// An IPv4 address in host byte order as the file writes it ("10.96.0.10").
std::string ipv4_text(uint32_t ip) {
  char text[INET_ADDRSTRLEN] = "?";
  in_addr a{htonl(ip)};
  inet_ntop(AF_INET, &a, text, sizeof(text));
  return text;
}

}  // namespace

std::string_view endpoint_state_name(EndpointState state) {
  switch (state) {
    case EndpointState::kReady:
      return "ready";
    case EndpointState::kTerminating:
      return "terminating";
    case EndpointState::kNotReady:
      return "not-ready";
  }
  return "?";
}

namespace service_address {

bool is_ipv4(const Address& a) { return std::memcmp(a.bytes, kMappedPrefix, sizeof(kMappedPrefix)) == 0; }

uint32_t ipv4(const Address& a) {
  return (uint32_t{a.bytes[12]} << 24) | (uint32_t{a.bytes[13]} << 16) | (uint32_t{a.bytes[14]} << 8) | a.bytes[15];
}

Address from_ipv4(uint32_t ip) {
  Address a{};
  std::memcpy(a.bytes, kMappedPrefix, sizeof(kMappedPrefix));
  a.bytes[12] = static_cast<uint8_t>(ip >> 24);
  a.bytes[13] = static_cast<uint8_t>(ip >> 16);
  a.bytes[14] = static_cast<uint8_t>(ip >> 8);
  a.bytes[15] = static_cast<uint8_t>(ip);
  return a;
}

std::string text(const Address& a) {
  if (is_ipv4(a)) return ipv4_text(ipv4(a));
  char out[INET6_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET6, a.bytes, out, sizeof(out));
  return out;
}

bool parse(const char* text, Address* out) {
  in_addr v4{};
  if (inet_pton(AF_INET, text, &v4) == 1) {
    *out = from_ipv4(ntohl(v4.s_addr));
    return true;
  }
  return inet_pton(AF_INET6, text, out->bytes) == 1;
}

const char* refused(const Address& a) {
  if (is_ipv4(a)) return refused_service_ipv4(ipv4(a));
  static constexpr uint8_t kZero[16] = {};
  if (std::memcmp(a.bytes, kZero, 15) == 0)
    return a.bytes[15] == 0 ? "unspecified (::)" : a.bytes[15] == 1 ? "loopback (::1)" : nullptr;
  if (a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80) return "link-local (fe80::/10)";
  if (a.bytes[0] == 0xff) return "multicast (ff00::/8)";
  return nullptr;
}

bool from_sockaddr(const sockaddr* sa, Address* address, uint16_t* port) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    *address = from_ipv4(ntohl(in->sin_addr.s_addr));
    *port = ntohs(in->sin_port);
    return true;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    std::memcpy(address->bytes, &in6->sin6_addr, sizeof(address->bytes));
    *port = ntohs(in6->sin6_port);
    return true;
  }
  return false;
}

socklen_t to_sockaddr(const Address& a, uint16_t port, sockaddr_storage* out) {
  *out = {};
  if (is_ipv4(a)) {
    auto* in = reinterpret_cast<sockaddr_in*>(out);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(ipv4(a));
    in->sin_port = htons(port);
    return sizeof(sockaddr_in);
  }
  auto* in6 = reinterpret_cast<sockaddr_in6*>(out);
  in6->sin6_family = AF_INET6;
  std::memcpy(&in6->sin6_addr, a.bytes, sizeof(a.bytes));
  in6->sin6_port = htons(port);
  return sizeof(sockaddr_in6);
}

}  // namespace service_address

std::shared_ptr<const ServiceTable> ServiceTable::open(std::shared_ptr<const TableBytes> bytes, std::string* error) {
  std::shared_ptr<ServiceTable> table(new ServiceTable(std::move(bytes)));
  if (!table->check(error)) return nullptr;
  return table;
}

ServiceTable::Api ServiceTable::api() const {
  return {(header_->flags & kApiReachable) != 0, std::string(text(header_->api_since)),
          std::string(text(header_->api_error))};
}

namespace {

// The checks of ServiceTable::check(), over bytes not yet trusted: every
// offset and count is compared before it is used, in 64 bits.
struct Checker {
  const uint8_t* base;
  size_t size;
  std::span<const uint8_t> strings;
  std::string* error;

  template <typename T>
  bool section(const Header& h, SectionIndex which, const char* name, std::span<const T>* out) {
    const Section& s = h.sections[which];
    uint64_t end = uint64_t{s.offset} + uint64_t{s.count} * sizeof(T);
    if (s.offset % 8 != 0 || s.offset < sizeof(Header) || end > size)
      return fail(error, std::string("section ") + name + " (offset " + std::to_string(s.offset) + ", " +
                             std::to_string(s.count) + " records) is not inside the table's " + std::to_string(size) +
                             " bytes at a multiple of 8");
    *out = std::span<const T>(reinterpret_cast<const T*>(base + s.offset), s.count);
    return true;
  }

  // The strings section holds no control byte (checked once, whole), so
  // a reference needs its bounds and length only.
  // The fast paths inline, the errors' text out of line: every record
  // passes through these on every change.
  bool string(StringRef ref, const Where& where, bool name) {
    size_t most = name ? kMaxServiceNameBytes : kMaxApiTextWritten;
    if (uint64_t{ref.offset} + ref.length <= strings.size() && ref.length <= most) [[likely]]
      return true;
    return string_refused(ref, where, most);
  }

  [[gnu::noinline, gnu::cold]] bool string_refused(StringRef ref, const Where& where, size_t most) {
    if (uint64_t{ref.offset} + ref.length > strings.size())
      return fail(error, where.text() + ": text outside the strings section");
    return fail(error, where.text() + ": longer than " + std::to_string(most) + " bytes");
  }

  bool address(const AddressRecord& a, const Where& where) {
    if (!service_address::refused(a)) [[likely]]
      return true;
    return address_refused(a, where);
  }

  [[gnu::noinline, gnu::cold]] bool address_refused(const AddressRecord& a, const Where& where) {
    return fail(error, where.text() + ": " + service_address::text(a) + " is " + service_address::refused(a) +
                           ": not an address a Service or pod holds");
  }

  static bool range(uint64_t first, uint64_t count, size_t total) { return first + count <= total; }
};

}  // namespace

bool ServiceTable::check(std::string* error) {
  const uint8_t* base = bytes_->data();
  const size_t size = bytes_->size();
  if (size < sizeof(Header)) return fail(error, "shorter than a table's header (" + std::to_string(size) + " bytes)");
  if (reinterpret_cast<uintptr_t>(base) % 8 != 0) return fail(error, "not at a multiple of 8 in memory");
  header_ = reinterpret_cast<const Header*>(base);
  const Header& h = *header_;
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) return fail(error, "not a services table (no RDMGWSVC)");
  if (h.version != kVersion)
    return fail(error, "table version " + std::to_string(h.version) + ", not " + std::to_string(kVersion) +
                           " (another agent version?)");
  if (h.file_bytes != size)
    return fail(error, "says it is " + std::to_string(h.file_bytes) + " bytes long, but is " + std::to_string(size) +
                           " (cut short, or written in place?)");
  uint32_t sum = crc32c(base + kChecksummedFrom, size - kChecksummedFrom);
  if (sum != h.checksum) return fail(error, "checksum does not match (the bytes changed after they were written)");

  Checker c{base, size, {}, error};
  const Section& s = h.sections[kStrings];
  if (uint64_t{s.offset} + s.count > size || s.offset < sizeof(Header))
    return fail(error, "section strings is not inside the table");
  strings_ = std::span<const uint8_t>(base + s.offset, s.count);
  c.strings = strings_;
  // Names are shown to operators (rdmagwctl services, the log), and the
  // writer puts a space for a control byte in the agent's own words.
  // Eight bytes at a time: a table's strings are megabytes, checked on
  // every change. A word has a byte below 0x20 when (w - 0x20..) & ~w &
  // 0x80.. is not zero, and a 0x7f when the same holds for 0 in w ^ 0x7f..
  // (exact for "some byte", which is all this asks).
  constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
  size_t i = 0;
  for (; i + 8 <= strings_.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, strings_.data() + i, 8);
    uint64_t del = w ^ (0x7f * kOnes);
    if ((((w - 0x20 * kOnes) & ~w) | ((del - kOnes) & ~del)) & kHigh) break;
  }
  for (; i < strings_.size(); ++i)
    if (strings_[i] < 0x20 || strings_[i] == 0x7f)
      return fail(error, "strings: a control byte at " + std::to_string(i) + ": no name or text here has one");
  if (!c.section(h, kServices, "services", &services_) || !c.section(h, kClusterIps, "cluster_ips", &cluster_ips_) ||
      !c.section(h, kPorts, "ports", &ports_) || !c.section(h, kEndpoints, "endpoints", &endpoints_) ||
      !c.section(h, kReady, "ready", &ready_) || !c.section(h, kClusterIpIndex, "cluster_ip_index", &by_cluster_ip_) ||
      !c.section(h, kEndpointIndex, "endpoint_index", &by_endpoint_) || !c.section(h, kNodes, "nodes", &nodes_))
    return false;
  if (!c.string(h.api_since, {nullptr, 0, "api.since"}, false) ||
      !c.string(h.api_error, {nullptr, 0, "api.error"}, false))
    return false;

  // Nodes: a name each, and where their node-mode rdmagw accepts tunnels
  // (a stream of the node's endpoints is sent there). Names are not
  // compared with each other: two records of one name would only mean
  // endpoints of that node name two records, each with its own tunnel.
  for (size_t ni = 0; ni < nodes_.size(); ++ni) {
    const Node& n = nodes_[ni];
    if (!c.string(n.name, {"nodes", ni, ".name"}, true)) return false;
    if (n.name.length == 0) return fail(error, at("nodes", ni) + ": no name");
    if ((n.flags & ~kNodeHasTunnel) != 0 || n.reserved != 0) return fail(error, at("nodes", ni) + ": unknown flags");
    if (n.flags & kNodeHasTunnel) {
      if (!c.address(n.tunnel, {"nodes", ni, ".tunnel"})) return false;
    } else if (n.tunnel != AddressRecord{}) {
      return fail(error, at("nodes", ni) + ": a tunnel address without the flag that says it has one");
    }
  }

  // Every Service owns the ports after the previous one's, in order, and
  // every port the endpoints after the previous port's: each record is
  // listed exactly once, by the one that claims it.
  uint64_t next_port = 0, next_ip = 0;
  for (size_t si = 0; si < services_.size(); ++si) {
    const Service& sv = services_[si];
    if (!c.string(sv.namespace_name, {"services", si, ".namespace"}, true) ||
        !c.string(sv.name, {"services", si, ".name"}, true))
      return false;
    if (sv.first_cluster_ip != next_ip ||
        !Checker::range(sv.first_cluster_ip, sv.cluster_ip_count, cluster_ips_.size()))
      return fail(error, at("services", si) + ": its ClusterIPs are not the ones after the previous Service's");
    if (sv.first_port != next_port || !Checker::range(sv.first_port, sv.port_count, ports_.size()))
      return fail(error, at("services", si) + ": its ports are not the ones after the previous Service's");
    next_ip += sv.cluster_ip_count;
    next_port += sv.port_count;
    for (uint32_t i = 0; i < sv.cluster_ip_count; ++i)
      if (!c.address(cluster_ips_[sv.first_cluster_ip + i], {"services", si, ".cluster_ips", i})) return false;
    for (uint32_t p = sv.first_port; p < sv.first_port + sv.port_count; ++p)
      if (ports_[p].service != si) return fail(error, at("ports", p) + ": names a Service other than its own");
  }
  if (next_ip != cluster_ips_.size() || next_port != ports_.size())
    return fail(error, "ClusterIPs or ports that no Service lists");

  uint64_t next_endpoint = 0, next_ready = 0;
  for (size_t pi = 0; pi < ports_.size(); ++pi) {
    const Port& p = ports_[pi];
    if (!c.string(p.name, {"ports", pi, ".name"}, true)) return false;
    if (p.port == 0) return fail(error, at("ports", pi) + ": port 0");
    if (p.first_endpoint != next_endpoint || !Checker::range(p.first_endpoint, p.endpoint_count, endpoints_.size()))
      return fail(error, at("ports", pi) + ": its endpoints are not the ones after the previous port's");
    if (p.first_ready != next_ready || !Checker::range(p.first_ready, p.ready_count, ready_.size()))
      return fail(error, at("ports", pi) + ": its ready list is not the one after the previous port's");
    next_endpoint += p.endpoint_count;
    next_ready += p.ready_count;
    uint64_t ready_seen = 0;
    for (uint32_t e = p.first_endpoint; e < p.first_endpoint + p.endpoint_count; ++e) {
      const Endpoint& ep = endpoints_[e];
      if (ep.port_index != pi) return fail(error, at("endpoints", e) + ": names a port other than its own");
      if (!c.address(ep.address, {"endpoints", e, ".address"})) return false;
      if (ep.port == 0) return fail(error, at("endpoints", e) + ": port 0");
      if (ep.state > static_cast<uint8_t>(EndpointState::kNotReady))
        return fail(error, at("endpoints", e) + ": state " + std::to_string(ep.state) +
                               " is none of ready, terminating, not-ready");
      if (ep.flags & ~kEndpointHasRdmagw) return fail(error, at("endpoints", e) + ": unknown flags");
      if (!c.string(ep.pod, {"endpoints", e, ".pod"}, true)) return false;
      if (ep.node != kNoNode && ep.node >= nodes_.size())
        return fail(error, at("endpoints", e) + ": names a node the table does not have");
      if (ep.reserved != 0) return fail(error, at("endpoints", e) + ": reserved bytes are not 0");
      if (ep.state == static_cast<uint8_t>(EndpointState::kReady)) ++ready_seen;
    }
    if (ready_seen != p.ready_count)
      return fail(error, at("ports", pi) + ": its ready list is not its ready endpoints");
    for (uint32_t r = p.first_ready; r < p.first_ready + p.ready_count; ++r) {
      uint32_t e = ready_[r];
      // Within the port, ready, and in increasing order (so none twice).
      if (e < p.first_endpoint || e >= p.first_endpoint + p.endpoint_count ||
          endpoints_[e].state != static_cast<uint8_t>(EndpointState::kReady) ||
          (r > p.first_ready && ready_[r - 1] >= e))
        return fail(error, at("ready", r) + ": not one of its port's ready endpoints, in order");
    }
  }
  if (next_endpoint != endpoints_.size() || next_ready != ready_.size())
    return fail(error, "endpoints or ready entries that no port lists");

  // The indexes: sizes a power of two, every used slot naming a record the
  // table has, a free slot to end every search. Whether the record has the
  // slot's key is asked at each lookup instead (a comparison with what the
  // caller reads next anyway), not here: that would read the records in
  // the slots' random order on every change. (A key missing from an index
  // is only not found.)
  for (auto [index, name, values] : {std::tuple{by_cluster_ip_, "cluster_ip_index", ports_.size()},
                                     std::tuple{by_endpoint_, "endpoint_index", endpoints_.size()}}) {
    if (!index.empty() && (index.size() & (index.size() - 1)) != 0)
      return fail(error, std::string(name) + ": " + std::to_string(index.size()) + " slots, not a power of two");
    size_t used = 0;
    for (size_t i = 0; i < index.size(); ++i) {
      const IndexSlot& slot = index[i];
      if (slot.used > 1) return fail(error, at(name, i) + ": neither used nor free");
      if (!slot.used) continue;
      ++used;
      if (slot.value >= values) return fail(error, at(name, i) + ": names a record the table does not have");
    }
    // At least one free slot: a search for a key that is not there ends.
    if (!index.empty() && used == index.size()) return fail(error, std::string(name) + ": no free slot");
  }
  return true;
}

const IndexSlot* ServiceTable::find(std::span<const IndexSlot> index, const AddressRecord& address,
                                    uint16_t port) const {
  if (index.empty()) return nullptr;
  size_t mask = index.size() - 1;
  size_t i = slot_hash(address, port) & mask;
  // Bounded: check() saw at least one free slot.
  for (size_t probes = 0; probes < index.size(); ++probes, i = (i + 1) & mask) {
    const IndexSlot& slot = index[i];
    if (!slot.used) return nullptr;
    if (slot.port == port && std::memcmp(slot.address.bytes, address.bytes, sizeof(address.bytes)) == 0) return &slot;
  }
  return nullptr;
}

const ServiceTable::Port* ServiceTable::find_cluster_ip(const AddressRecord& address, uint16_t port) const {
  const IndexSlot* slot = find(by_cluster_ip_, address, port);
  if (!slot) return nullptr;
  // A slot whose port does not have the key it was filed under finds nothing.
  const Port& p = ports_[slot->value];
  if (p.port != port) return nullptr;
  for (const auto& a : cluster_ips(services_[p.service]))
    if (std::memcmp(a.bytes, address.bytes, sizeof(a.bytes)) == 0) return &p;
  return nullptr;
}

ServiceTable::EndpointRef ServiceTable::find_endpoint(const AddressRecord& address, uint16_t port) const {
  const IndexSlot* slot = find(by_endpoint_, address, port);
  if (!slot) return {};
  const Endpoint& e = endpoints_[slot->value];
  if (e.port != port || std::memcmp(e.address.bytes, address.bytes, sizeof(address.bytes)) != 0) return {};
  return {&ports_[e.port_index], &e};
}

const ServiceTable::Node* ServiceTable::node(const Endpoint& e) const {
  return e.node == kNoNode ? nullptr : &nodes_[e.node];  // check() saw it inside
}

std::string_view ServiceTable::node_name(const Endpoint& e) const {
  const Node* n = node(e);
  return n ? text(n->name) : std::string_view();
}

const AddressRecord* ServiceTable::node_tunnel(const Endpoint& e) const {
  const Node* n = node(e);
  return n && (n->flags & kNodeHasTunnel) ? &n->tunnel : nullptr;
}

std::string ServiceTable::service_name(const Port& port) const {
  const Service& s = services_[port.service];
  return std::string(text(s.namespace_name)) + "/" + std::string(text(s.name));
}

}  // namespace rdmagw
