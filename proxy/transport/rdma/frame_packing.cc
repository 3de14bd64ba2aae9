// SPDX-License-Identifier: Apache-2.0
#include "proxy/transport/rdma/frame_packing.h"

#include "proxy/tunnel/frame.h"

namespace rdmagw::transport {

int pack_frames(const iovec* segments, int segment_count, size_t room, int max_pieces, PackedPiece* out,
                uint32_t* bytes) {
  int pieces = 0;
  size_t total = 0;
  for (int i = 0; i < segment_count && pieces < max_pieces; ++i) {
    auto* base = static_cast<const uint8_t*>(segments[i].iov_base);
    size_t len = segments[i].iov_len;
    size_t take = 0;
    while (take + tunnel::kHeaderSize <= len) {
      size_t frame = tunnel::kHeaderSize + tunnel::get_u32(base + take + 8);
      if (take + frame > len || total + take + frame > room) break;
      take += frame;
    }
    if (take == 0) break;
    out[pieces++] = {base, static_cast<uint32_t>(take)};
    total += take;
    if (take < len) break;  // the rest of this segment goes in the next SEND
  }
  *bytes = static_cast<uint32_t>(total);
  return pieces;
}

}  // namespace rdmagw::transport
