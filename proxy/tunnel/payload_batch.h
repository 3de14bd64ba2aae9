// SPDX-License-Identifier: Apache-2.0
#pragma once
// The stream payloads of one transport batch: while a session parses, each
// DATA (or OPEN) payload is kept as a piece of the transport's receive
// buffer; at the end of the batch every stream gets all of its pieces at
// once, in their order, so that one sendmsg writes them. Streams with the
// fewest bytes go first (ties in order of arrival): a 64-byte reply does
// not wait behind a bulk stream's quarter megabyte of the same batch.
//
// No allocation per batch once warm: the vectors are kept and reused.
// What a stream is owed lives in the stream (its piece and byte counts),
// so that adding a piece and dropping a stream cost no lookup.
#include <sys/uio.h>

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "proxy/tunnel/stream.h"

namespace rdmagw::tunnel {

class PayloadBatch {
 public:
  // Pieces kept before the batch must be handed out (the session delivers
  // in parts beyond, so that what it keeps stays small).
  static constexpr size_t kMaxPieces = 256;

  bool empty() const { return pieces_.empty(); }
  bool full() const { return pieces_.size() >= kMaxPieces; }
  // `bytes` for `stream`, valid until deliver() returns. Not from inside
  // deliver()'s `each` (a stream does not call its session while it is
  // handed bytes: Session asserts it too).
  void add(Stream& stream, std::span<const uint8_t> bytes);
  // `stream` leaves (reset, detached): its pieces are not handed out, also
  // when it leaves while the batch is being handed out.
  void drop(Stream& stream);
  // Hands the batch out: `each(stream, pieces, bytes)` once per stream that
  // has pieces, fewest bytes first. The batch is taken out first: a call
  // that ends the session from inside (which delivers before it lets its
  // transport go) finds nothing to hand out again.
  template <typename Each>
  void deliver(Each&& each);

 private:
  struct Piece {
    Stream* stream;  // null: its stream was dropped
    iovec piece;
  };
  // Sorts the taken batch's streams and their pieces (in delivering_).
  void sort_taken();

  std::vector<Piece> pieces_, delivering_;
  std::vector<Stream*> streams_, delivering_streams_;  // in order of first arrival
  std::vector<iovec> sorted_;
  bool handing_out_ = false;
};

template <typename Each>
void PayloadBatch::deliver(Each&& each) {
  if (pieces_.empty()) return;
  assert(!handing_out_ && "pieces were added while a batch was handed out");
  handing_out_ = true;
  delivering_.swap(pieces_);
  delivering_streams_.swap(streams_);
  pieces_.clear();
  streams_.clear();
  sort_taken();
  for (Stream* s : delivering_streams_) {
    uint32_t count = s->gathered_pieces_;
    if (count == 0) continue;  // dropped meanwhile
    std::span<const iovec> pieces(sorted_.data() + s->gather_order_ - count, count);
    uint32_t bytes = s->gathered_bytes_;
    s->gathered_pieces_ = s->gathered_bytes_ = 0;
    each(*s, pieces, bytes);
  }
  delivering_.clear();
  delivering_streams_.clear();
  handing_out_ = false;
}

}  // namespace rdmagw::tunnel
