// SPDX-License-Identifier: Apache-2.0
// The frame decoder (proxy/tunnel/frame.h) on arbitrary bytes, as a peer's
// transport delivers them: every header and payload decoder on whatever
// frames the bytes hold.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "proxy/tunnel/frame.h"

using namespace rdmagw::tunnel;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // The receiver's max_data: its buffer size, 1 KiB .. 1 MiB.
  uint32_t max_data = 1024u << (data[0] % 11);
  FrameReader reader(max_data);
  size_t off = 1;
  for (int frames = 0; off < size && frames < 4096; ++frames) {
    FrameHeader h;
    std::span<const uint8_t> payload;
    size_t used = 0;
    std::string reason;
    auto status = reader.next(data + off, size - off, &h, &payload, &used, &reason);
    if (status != FrameReader::Status::kFrame) break;
    if (used < kHeaderSize || used > size - off || payload.size() != h.length) __builtin_trap();
    off += used;
    switch (h.type) {
      case FrameType::kHello: {
        HelloPayload hello;
        decode_hello(payload, &hello, &reason);
        break;
      }
      case FrameType::kOpen: {
        OpenPayload open;
        if (decode_open(payload, &open, &reason) && open.target.size() + open.first_bytes.size() + 2 != payload.size())
          __builtin_trap();
        // Between peers that both offer origins: an origin that decodes
        // encodes back to the same bytes, and accounts for every byte.
        if (decode_open(payload, &open, &reason, /*with_origin=*/true)) {
          size_t origin = origin_length(open.origin);
          if (open.target.size() + 2 + 1 + origin + open.first_bytes.size() != payload.size()) __builtin_trap();
          uint8_t again[kMaxOriginLength];
          if (origin > sizeof(again)) __builtin_trap();
          encode_origin(again, open.origin);
          if (std::memcmp(again, payload.data() + 2 + open.target.size() + 1, origin) != 0) __builtin_trap();
        }
        break;
      }
      case FrameType::kSession: {
        SessionPayload session;
        decode_session(payload, &session, &reason);
        break;
      }
      case FrameType::kAuth: {
        AuthPayload auth;
        decode_auth(payload, &auth, &reason);
        break;
      }
      case FrameType::kWindow:
      case FrameType::kReset:
      case FrameType::kGoaway: {
        uint32_t v;
        decode_u32(h, payload, &v, &reason);
        break;
      }
      case FrameType::kPing:
      case FrameType::kPong:
      case FrameType::kAck: {
        uint64_t v;
        decode_u64(h, payload, &v, &reason);
        break;
      }
      case FrameType::kData:
      case FrameType::kFin:
        break;
    }
  }
  return 0;
}
