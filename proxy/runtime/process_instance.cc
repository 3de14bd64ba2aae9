// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/process_instance.h"

#include <atomic>
#include <random>

namespace rdmagw {

namespace {
std::atomic<uint64_t> g_instance{0};
}

uint64_t process_instance() {
  uint64_t v = g_instance.load();
  if (v != 0) return v;
  std::random_device random;
  uint64_t drawn = 0;
  while (drawn == 0) drawn = (uint64_t{random()} << 32) | random();  // 0 means "none"
  // The first caller's draw wins.
  return g_instance.compare_exchange_strong(v, drawn) ? drawn : v;
}

void inherit_process_instance(uint64_t instance) {
  if (instance != 0) g_instance.store(instance);
}

}  // namespace rdmagw
