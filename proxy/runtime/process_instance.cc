#include "proxy/runtime/process_instance.h"

#include <random>

namespace rdmagw {

uint64_t process_instance() {
  static const uint64_t instance = [] {
    std::random_device random;
    uint64_t v = 0;
    while (v == 0) v = (uint64_t{random()} << 32) | random();  // 0 means "none"
    return v;
  }();
  return instance;
}

}  // namespace rdmagw
