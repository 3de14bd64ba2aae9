// SPDX-License-Identifier: Apache-2.0
#include "config/services_table.h"

#include <arpa/inet.h>

#include <cstring>

#include "common/crc32c.h"

namespace rdmagw {

using namespace services_table;

namespace {

// Kubernetes names are at most 253 bytes; anything longer is not one.
constexpr size_t kMaxNameBytes = 253;
// api.since and api.error: cut to 1024 bytes and "..." by the writer.
constexpr size_t kMaxApiTextBytes = 1027;

constexpr uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

bool fail(std::string* error, std::string why) {
  *error = std::move(why);
  return false;
}

std::string at(const char* what, size_t index) { return std::string(what) + "[" + std::to_string(index) + "]"; }

// Why an IPv4 address is not one a Service or pod holds (empty: it is).
// The services file's rule (services_file.cc) for the same addresses.
const char* refused_ipv4(uint32_t ip) {
  return (ip >> 24) == 127      ? "loopback"
         : (ip >> 24) == 0      ? "unspecified (0.0.0.0/8)"
         : (ip >> 16) == 0xA9FE ? "link-local (169.254.0.0/16)"
         : (ip >> 28) == 0xE    ? "multicast (224.0.0.0/4)"
         : ip == 0xFFFFFFFF     ? "broadcast"
                                : nullptr;
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

std::string ipv4_text(uint32_t ip) {
  char text[INET_ADDRSTRLEN] = "?";
  in_addr a{htonl(ip)};
  inet_ntop(AF_INET, &a, text, sizeof(text));
  return text;
}

uint32_t ServiceTable::ipv4(const AddressRecord& a) {
  return (uint32_t{a.bytes[12]} << 24) | (uint32_t{a.bytes[13]} << 16) | (uint32_t{a.bytes[14]} << 8) | a.bytes[15];
}

AddressRecord ServiceTable::mapped(uint32_t ip) {
  AddressRecord a{};
  std::memcpy(a.bytes, kMappedPrefix, sizeof(kMappedPrefix));
  a.bytes[12] = static_cast<uint8_t>(ip >> 24);
  a.bytes[13] = static_cast<uint8_t>(ip >> 16);
  a.bytes[14] = static_cast<uint8_t>(ip >> 8);
  a.bytes[15] = static_cast<uint8_t>(ip);
  return a;
}

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
                             std::to_string(s.count) + " records) is not inside the table's " +
                             std::to_string(size) + " bytes at a multiple of 8");
    *out = std::span<const T>(reinterpret_cast<const T*>(base + s.offset), s.count);
    return true;
  }

  // The strings section holds no control byte (checked once, whole), so
  // a reference needs its bounds and length only.
  bool string(StringRef ref, const std::string& what, bool name) {
    if (uint64_t{ref.offset} + ref.length > strings.size())
      return fail(error, what + ": text outside the strings section");
    size_t most = name ? kMaxNameBytes : kMaxApiTextBytes;
    if (ref.length > most) return fail(error, what + ": longer than " + std::to_string(most) + " bytes");
    return true;
  }

  bool address(const AddressRecord& a, const std::string& what) {
    if (std::memcmp(a.bytes, kMappedPrefix, sizeof(kMappedPrefix)) != 0)
      return fail(error, what + ": not an IPv4 address (IPv6 is not carried yet)");
    uint32_t ip = ServiceTable::ipv4(a);
    if (const char* kind = refused_ipv4(ip))
      return fail(error, what + ": " + ipv4_text(ip) + " is " + kind + ": not an address a Service or pod holds");
    return true;
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
  for (size_t i = 0; i < strings_.size(); ++i)
    if (strings_[i] < 0x20 || strings_[i] == 0x7f)
      return fail(error, "strings: a control byte at " + std::to_string(i) + ": no name or text here has one");
  if (!c.section(h, kServices, "services", &services_) || !c.section(h, kClusterIps, "cluster_ips", &cluster_ips_) ||
      !c.section(h, kPorts, "ports", &ports_) || !c.section(h, kEndpoints, "endpoints", &endpoints_) ||
      !c.section(h, kReady, "ready", &ready_) ||
      !c.section(h, kClusterIpIndex, "cluster_ip_index", &by_cluster_ip_) ||
      !c.section(h, kEndpointIndex, "endpoint_index", &by_endpoint_))
    return false;
  if (!c.string(h.api_since, "api.since", false) || !c.string(h.api_error, "api.error", false)) return false;

  // Every Service owns the ports after the previous one's, in order, and
  // every port the endpoints after the previous port's: each record is
  // listed exactly once, by the one that claims it.
  uint64_t next_port = 0, next_ip = 0;
  for (size_t si = 0; si < services_.size(); ++si) {
    const Service& sv = services_[si];
    const std::string what = at("services", si);
    if (!c.string(sv.namespace_name, what + ".namespace", true) || !c.string(sv.name, what + ".name", true))
      return false;
    if (sv.first_cluster_ip != next_ip || !Checker::range(sv.first_cluster_ip, sv.cluster_ip_count, cluster_ips_.size()))
      return fail(error, what + ": its ClusterIPs are not the ones after the previous Service's");
    if (sv.first_port != next_port || !Checker::range(sv.first_port, sv.port_count, ports_.size()))
      return fail(error, what + ": its ports are not the ones after the previous Service's");
    next_ip += sv.cluster_ip_count;
    next_port += sv.port_count;
    for (uint32_t i = 0; i < sv.cluster_ip_count; ++i)
      if (!c.address(cluster_ips_[sv.first_cluster_ip + i], what + at(".cluster_ips", i))) return false;
    for (uint32_t p = sv.first_port; p < sv.first_port + sv.port_count; ++p)
      if (ports_[p].service != si) return fail(error, at("ports", p) + ": names a Service other than its own");
  }
  if (next_ip != cluster_ips_.size() || next_port != ports_.size())
    return fail(error, "ClusterIPs or ports that no Service lists");

  uint64_t next_endpoint = 0, next_ready = 0;
  for (size_t pi = 0; pi < ports_.size(); ++pi) {
    const Port& p = ports_[pi];
    const std::string what = at("ports", pi);
    if (!c.string(p.name, what + ".name", true)) return false;
    if (p.port == 0) return fail(error, what + ": port 0");
    if (p.first_endpoint != next_endpoint || !Checker::range(p.first_endpoint, p.endpoint_count, endpoints_.size()))
      return fail(error, what + ": its endpoints are not the ones after the previous port's");
    if (p.first_ready != next_ready || !Checker::range(p.first_ready, p.ready_count, ready_.size()))
      return fail(error, what + ": its ready list is not the one after the previous port's");
    next_endpoint += p.endpoint_count;
    next_ready += p.ready_count;
    uint64_t ready_seen = 0;
    for (uint32_t e = p.first_endpoint; e < p.first_endpoint + p.endpoint_count; ++e) {
      const Endpoint& ep = endpoints_[e];
      const std::string ewhat = at("endpoints", e);
      if (ep.port_index != pi) return fail(error, ewhat + ": names a port other than its own");
      if (!c.address(ep.address, ewhat + ".address")) return false;
      if (ep.port == 0) return fail(error, ewhat + ": port 0");
      if (ep.state > static_cast<uint8_t>(EndpointState::kNotReady))
        return fail(error, ewhat + ": state " + std::to_string(ep.state) + " is none of ready, terminating, not-ready");
      if (ep.flags & ~kEndpointHasRdmagw) return fail(error, ewhat + ": unknown flags");
      if (!c.string(ep.pod, ewhat + ".pod", true) || !c.string(ep.node, ewhat + ".node", true)) return false;
      if (ep.state == static_cast<uint8_t>(EndpointState::kReady)) ++ready_seen;
    }
    if (ready_seen != p.ready_count) return fail(error, what + ": its ready list is not its ready endpoints");
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

  // The indexes: sizes a power of two, and every key it holds names a record
  // that has that key. (What is missing from one is only not found.)
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
  for (size_t i = 0; i < by_cluster_ip_.size(); ++i) {
    const IndexSlot& slot = by_cluster_ip_[i];
    if (!slot.used) continue;
    const Port& p = ports_[slot.value];
    bool listed = p.port == slot.port;
    if (listed) {
      listed = false;
      for (const auto& ip : cluster_ips(services_[p.service]))
        if (std::memcmp(ip.bytes, slot.address.bytes, sizeof(ip.bytes)) == 0) listed = true;
    }
    if (!listed) return fail(error, at("cluster_ip_index", i) + ": a key its port's Service does not have");
  }
  for (size_t i = 0; i < by_endpoint_.size(); ++i) {
    const IndexSlot& slot = by_endpoint_[i];
    if (!slot.used) continue;
    const Endpoint& e = endpoints_[slot.value];
    if (e.port != slot.port || std::memcmp(e.address.bytes, slot.address.bytes, sizeof(e.address.bytes)) != 0)
      return fail(error, at("endpoint_index", i) + ": a key its endpoint does not have");
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

const ServiceTable::Port* ServiceTable::find_cluster_ip(uint32_t ip, uint16_t port) const {
  const IndexSlot* slot = find(by_cluster_ip_, mapped(ip), port);
  return slot ? &ports_[slot->value] : nullptr;
}

ServiceTable::EndpointRef ServiceTable::find_endpoint(uint32_t ip, uint16_t port) const {
  const IndexSlot* slot = find(by_endpoint_, mapped(ip), port);
  if (!slot) return {};
  const Endpoint& e = endpoints_[slot->value];
  return {&ports_[e.port_index], &e};
}

std::string ServiceTable::service_name(const Port& port) const {
  const Service& s = services_[port.service];
  return std::string(text(s.namespace_name)) + "/" + std::string(text(s.name));
}

}  // namespace rdmagw
