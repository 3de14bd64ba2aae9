// SPDX-License-Identifier: Apache-2.0
#pragma once
// The tunnel keys a test gives its sessions (SessionSettings::tunnel, shared
// and const, as rdmagw shares the configuration's): tunnel_keys(s) is s's own
// copy to change, leaving any other settings that shared them alone.
#include <memory>

#include "config/config.h"
#include "proxy/tunnel/session.h"

namespace rdmagw::test {

inline TunnelConfig& tunnel_keys(tunnel::SessionSettings& settings) {
  auto own = std::make_shared<TunnelConfig>(*settings.tunnel);
  settings.tunnel = own;
  return *own;
}

}  // namespace rdmagw::test
