// SPDX-License-Identifier: Apache-2.0
#include "proxy/tunnel/payload_batch.h"

namespace rdmagw::tunnel {

void PayloadBatch::add(Stream& stream, std::span<const uint8_t> bytes) {
  assert(!handing_out_ && "a stream called its session while it was handed bytes");
  if (stream.gathered_pieces_ == 0) {
    stream.gather_order_ = static_cast<uint32_t>(streams_.size());
    streams_.push_back(&stream);
  }
  ++stream.gathered_pieces_;
  stream.gathered_bytes_ += static_cast<uint32_t>(bytes.size());  // within the stream window: no overflow
  pieces_.push_back({&stream, iovec{const_cast<uint8_t*>(bytes.data()), bytes.size()}});
}

void PayloadBatch::drop(Stream& stream) {
  if (stream.gathered_pieces_ == 0) return;
  for (auto& p : pieces_)
    if (p.stream == &stream) p.stream = nullptr;
  std::erase(streams_, &stream);
  stream.gathered_pieces_ = stream.gathered_bytes_ = 0;
}

void PayloadBatch::sort_taken() {
  // Fewest bytes first; ties in order of arrival. std::sort works in place.
  std::sort(delivering_streams_.begin(), delivering_streams_.end(), [](const Stream* a, const Stream* b) {
    return a->gathered_bytes_ != b->gathered_bytes_ ? a->gathered_bytes_ < b->gathered_bytes_
                                                    : a->gather_order_ < b->gather_order_;
  });
  // Each stream's pieces side by side, in their order (a counting sort):
  // gather_order_ becomes the cursor where its next piece goes, and ends
  // one past its last.
  uint32_t cursor = 0;
  for (Stream* s : delivering_streams_) {
    s->gather_order_ = cursor;
    cursor += s->gathered_pieces_;
  }
  sorted_.resize(cursor);
  for (const auto& p : delivering_)
    if (p.stream) sorted_[p.stream->gather_order_++] = p.piece;
}

}  // namespace rdmagw::tunnel
