// SPDX-License-Identifier: Apache-2.0
#pragma once
// Writes a services table (services_table_format.h) from Services given in
// order: each Service, then its ports, each port then its endpoints. Used
// for the services file's JSON (services_file.cc), by `rdmagw
// --services-table`, and by tests; rdmagw-k8s has its own writer in Go.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/services_table.h"

namespace rdmagw {

// A table's bytes in memory (8-aligned).
class OwnedTableBytes final : public TableBytes {
 public:
  // At least one word, so that data() is never null (not even for none).
  explicit OwnedTableBytes(size_t size) : words_(size / 8 + 1), size_(size) {}
  const uint8_t* data() const override { return reinterpret_cast<const uint8_t*>(words_.data()); }
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words_.data()); }
  size_t size() const override { return size_; }

 private:
  std::vector<uint64_t> words_;
  size_t size_;
};

class ServiceTableBuilder {
 public:
  void set_api(bool reachable, std::string_view since, std::string_view error);
  // A Service, and then its ports.
  void add_service(std::string_view namespace_name, std::string_view name,
                   const std::vector<services_table::AddressRecord>& cluster_ips);
  // A port of the last Service. False, and *error saying which Service
  // has it already, when one of its ClusterIPs with this port is taken.
  bool add_port(std::string_view name, uint16_t port, std::string* error);
  // A node whose node-mode rdmagw accepts tunnels at `tunnel`. False, and
  // *error, when the node has one already.
  bool add_node_tunnel(std::string_view node, const services_table::AddressRecord& tunnel, std::string* error);
  // An endpoint of the last port, on `node` ("": none named).
  void add_endpoint(const services_table::AddressRecord& address, uint16_t port, EndpointState state, bool rdmagw,
                    std::string_view pod, std::string_view node);

  // The table, laid out and checksummed.
  std::shared_ptr<OwnedTableBytes> finish() const;

 private:
  services_table::StringRef intern(std::string_view text);
  uint32_t node_index(std::string_view node);  // its record, made on first use

  std::string strings_;
  std::unordered_map<std::string, services_table::StringRef> interned_;
  uint32_t flags_ = 0;
  services_table::StringRef since_{}, error_{};
  std::vector<services_table::ServiceRecord> services_;
  std::vector<services_table::AddressRecord> cluster_ips_;
  std::vector<services_table::PortRecord> ports_;
  std::vector<services_table::EndpointRecord> endpoints_;
  std::vector<services_table::NodeRecord> nodes_;
  std::unordered_map<std::string, uint32_t> node_indexes_;
  std::unordered_map<AddressPort, uint32_t, AddressPortHash> cluster_ip_owner_;  // -> port index
};

}  // namespace rdmagw
