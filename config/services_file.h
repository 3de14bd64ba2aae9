// SPDX-License-Identifier: Apache-2.0
#pragma once
// The services file that rdmagw-k8s writes (docs/kubernetes.md): Kubernetes
// Services with their ports and endpoints as JSON, parsed into a services
// table (services_table.h), the form rdmagw-k8s also writes for sidecars to
// map instead.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "config/services_table.h"

namespace rdmagw {

// Larger files are refused unread: 10,000 Services of 10 endpoints make
// about 3 MB.
inline constexpr size_t kMaxServicesFileBytes = 64u << 20;

// Parses the file's content. False with *error naming the field
// ("services[2].ports[0].endpoints[1].address: ...") on anything malformed;
// fields it does not know are ignored (a newer agent may add some), but a
// format other than "rdmagw-services/1" is refused.
bool parse_services_file(std::string_view text, std::shared_ptr<const ServiceTable>* table, std::string* error);

}  // namespace rdmagw
