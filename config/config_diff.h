// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a reload would change, compared key by key: the settings that only
// a restart can apply, and a readable list of everything else.
#include <string>
#include <vector>

#include "config/config.h"

namespace rdmagw {

// "tunnel.tcp_port: 7471 -> 7481" for every setting the running process
// cannot change (the tunnel, workers, node, admin). Empty: reloadable.
std::vector<std::string> restart_only_changes(const Config& running, const Config& next);

// "listener web added", "peer b changed", "targets: 1 added, 0 removed", ...
std::vector<std::string> describe_changes(const Config& running, const Config& next);

}  // namespace rdmagw
