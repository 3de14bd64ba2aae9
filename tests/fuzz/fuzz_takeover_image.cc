// SPDX-License-Identifier: Apache-2.0
// The takeover image decoder (proxy/runtime/takeover_image.h): the bytes a
// new process receives on the takeover socket. What it accepts must encode
// back to bytes that decode the same (a process rebuilds from it).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "proxy/runtime/takeover_image.h"

using namespace rdmagw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ProcessImage image;
  std::string error;
  if (!decode_process_image(data, size, &image, &error)) return 0;
  // Written again in the version it came in (a version-1 image's sessions
  // do not have the values version 2 requires).
  std::vector<uint8_t> encoded = encode_process_image(image, image.version);
  ProcessImage again;
  if (!decode_process_image(encoded.data(), encoded.size(), &again, &error)) __builtin_trap();
  if (encode_process_image(again, again.version) != encoded) __builtin_trap();
  return 0;
}
