// SPDX-License-Identifier: Apache-2.0
#pragma once
// Chooses what one SEND carries: whole frames only (the receiver parses each
// message on its own), taken in order from queued buffer segments, at most
// `max_pieces` pieces (SGEs) and `room` bytes. Pure, so it is unit-tested
// without a device.
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace rdmagw::transport {

struct PackedPiece {
  const uint8_t* data;
  uint32_t length;
};

// `segments` hold back-to-back frames (a segment never ends mid-frame).
// Fills `out` and returns the number of pieces; *bytes gets the total. Zero
// pieces with segments present means the first frame alone exceeds `room`.
int pack_frames(const iovec* segments, int segment_count, size_t room, int max_pieces, PackedPiece* out,
                uint32_t* bytes);

}  // namespace rdmagw::transport
