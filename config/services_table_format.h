// SPDX-License-Identifier: Apache-2.0
#pragma once
// The services table's bytes (docs/kubernetes.md, "The services table"):
// what rdmagw-k8s writes beside the services file and every sidecar of the
// node maps read-only, so that the pages are shared and a change costs a
// sidecar a map and a check, not a parse and a copy. The records below are
// the file's layout, little-endian, read in place; each section starts at
// a multiple of 8. rdmagw-k8s writes the same layout (tools/rdmagw-k8s/
// table.go); a change here is a new version there too.
#include <bit>
#include <cstddef>
#include <cstdint>

namespace rdmagw::services_table {

static_assert(std::endian::native == std::endian::little, "the table is read in place: little-endian hosts only");

inline constexpr char kMagic[8] = {'R', 'D', 'M', 'G', 'W', 'S', 'V', 'C'};
// 2: nodes, and whether a node-mode rdmagw accepts tunnels on one.
inline constexpr uint32_t kVersion = 2;

// Text in the strings section.
struct StringRef {
  uint32_t offset;  // from the section's start
  uint32_t length;  // bytes
};

// Where a section is: `count` records from `offset` (from the file's start).
struct Section {
  uint32_t offset;
  uint32_t count;
};

enum SectionIndex : uint32_t {
  kStrings,         // bytes (count: the section's length)
  kServices,        // ServiceRecord
  kClusterIps,      // AddressRecord
  kPorts,           // PortRecord
  kEndpoints,       // EndpointRecord
  kReady,           // uint32_t: endpoint indexes, each port's ready ones together
  kClusterIpIndex,  // IndexSlot: ClusterIP and port -> port index
  kEndpointIndex,   // IndexSlot: endpoint address and port -> endpoint index
  kNodes,           // NodeRecord: every node an endpoint names or the writer gives a tunnel, each once
  kSectionCount,
};

inline constexpr uint32_t kApiReachable = 1;  // Header::flags

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t checksum;  // CRC-32C of every byte after this field to file_bytes
  uint64_t file_bytes;
  uint32_t flags;
  uint32_t reserved;    // 0
  StringRef api_since;  // the agent's words about the API server (api.since, api.error)
  StringRef api_error;
  Section sections[kSectionCount];
};
inline constexpr size_t kChecksummedFrom = offsetof(Header, file_bytes);

// An address as 16 bytes: IPv4 as ::ffff:a.b.c.d.
struct AddressRecord {
  uint8_t bytes[16];
  bool operator==(const AddressRecord&) const = default;
};

struct ServiceRecord {
  StringRef namespace_name;
  StringRef name;
  uint32_t first_cluster_ip;  // its ClusterIPs: [first, first + count) of kClusterIps
  uint32_t cluster_ip_count;
  uint32_t first_port;  // its ports: [first, first + count) of kPorts
  uint32_t port_count;
};

struct PortRecord {
  uint32_t service;  // index of the Service that lists it
  StringRef name;
  uint16_t port;
  uint16_t reserved;        // 0
  uint32_t first_endpoint;  // [first, first + count) of kEndpoints
  uint32_t endpoint_count;
  uint32_t first_ready;  // [first, first + count) of kReady
  uint32_t ready_count;
};

inline constexpr uint8_t kEndpointHasRdmagw = 1;  // EndpointRecord::flags

inline constexpr uint32_t kNoNode = 0xFFFFFFFF;  // EndpointRecord::node: the endpoint names none

struct EndpointRecord {
  AddressRecord address;
  uint16_t port;
  uint8_t state;  // EndpointState
  uint8_t flags;
  uint32_t port_index;  // the PortRecord that lists it
  StringRef pod;
  uint32_t node;      // index in kNodes, or kNoNode
  uint32_t reserved;  // 0
};

// A node-mode rdmagw runs there and accepts tunnels at `tunnel`: the
// node's endpoints without a sidecar of their own are reached through it
// (docs/kubernetes.md, "Endpoints behind a node-mode rdmagw").
inline constexpr uint32_t kNodeHasTunnel = 1;  // NodeRecord::flags

struct NodeRecord {
  StringRef name;        // not empty; one record per node (the reader does not rely on it)
  AddressRecord tunnel;  // with kNodeHasTunnel; all zero without
  uint32_t flags;
  uint32_t reserved;  // 0
};

// An open-addressing hash table: a power of two slots (or none), a key's
// search starting at slot_hash() modulo the count, going on to the next
// slot until the key or an unused slot.
struct IndexSlot {
  AddressRecord address;
  uint16_t port;
  uint16_t used;  // 1: the slot holds a key
  uint32_t value;
};

static_assert(sizeof(Header) == 120 && sizeof(StringRef) == 8 && sizeof(Section) == 8);
static_assert(sizeof(ServiceRecord) == 32 && sizeof(PortRecord) == 32 && sizeof(EndpointRecord) == 40);
static_assert(sizeof(AddressRecord) == 16 && sizeof(IndexSlot) == 24 && sizeof(NodeRecord) == 32);

// FNV-1a (64 bits) of the address's 16 bytes and the port's 2 (little-endian).
inline uint64_t slot_hash(const AddressRecord& address, uint16_t port) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint8_t byte) { h = (h ^ byte) * 0x100000001b3ull; };
  for (uint8_t b : address.bytes) mix(b);
  mix(static_cast<uint8_t>(port));
  mix(static_cast<uint8_t>(port >> 8));
  return h;
}

}  // namespace rdmagw::services_table
