// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a node name may be. A name comes from this node's configuration, and
// from peers: the HELLO a peer sends, the common name of its certificate.
// It is printed in logs, metrics labels, the admin endpoint and rdmagwctl's
// tables, so it is refused where it enters, not escaped wherever it goes:
// ASCII letters, digits, '.', '-' and '_', 1 to 255 bytes (the HELLO's
// length field is one byte). Host names, Kubernetes node and pod names and
// DNS names all fit.
#include <string>
#include <string_view>

namespace rdmagw {

// Empty if `name` is a valid node name; otherwise why not, naming the first
// offending byte ("byte 3 is 0x1b, ...").
std::string node_name_problem(std::string_view name);

// The rule in words, for messages and docs.
inline constexpr std::string_view kNodeNameRule = "1 to 255 bytes of ASCII letters, digits, '.', '-' and '_'";

}  // namespace rdmagw
