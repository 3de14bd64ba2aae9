// SPDX-License-Identifier: Apache-2.0
#pragma once
// The frame delivery loop, one for every transport: the frames in bytes a
// transport received (TCP: its receive buffer, or the records it opened;
// RDMA: one message) go one by one to its sink, in one FrameBatch. What
// differs between transports is a policy, not a second loop:
//
//   bool closed() const                    stop before the next frame
//   void on_header(const FrameHeader&)     each frame, before its sink sees it
//   bool after_frame()                     false: stop after this frame
//   bool after_refusal()                   true: go on after the sink refused
//                                          a frame (it closed the transport)
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "proxy/tunnel/frame.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw::tunnel {

struct Delivery {
  enum class End {
    kAllUsed,    // every byte was a whole frame, delivered
    kShort,      // the bytes end inside a frame (its header is whole and valid if kHeaderSize are there)
    kMalformed,  // `reason` says what is wrong; the transport must fail
    kRefused,    // the sink refused a frame (it closed the transport) and the policy did not go on
    kStopped,    // closed, no sink, or the policy said stop after a frame
  };
  End end = End::kAllUsed;
  size_t consumed = 0;  // bytes of the frames delivered
  std::string reason;
};

// `sink` is read again before each frame: a frame may rebind the transport
// to another sink (the acceptor hands a resuming transport to its session).
// The batch ends on return, while `bytes` still holds the payloads.
template <typename Policy>
Delivery deliver_frames(const FrameReader& reader, std::span<const uint8_t> bytes, TransportSink* const& sink,
                        Policy& policy) {
  Delivery d;
  FrameBatch batch;
  while (!policy.closed()) {
    if (d.consumed == bytes.size()) return d;
    FrameHeader header;
    std::span<const uint8_t> payload;
    size_t used = 0;
    auto status =
        reader.next(bytes.data() + d.consumed, bytes.size() - d.consumed, &header, &payload, &used, &d.reason);
    if (status == FrameReader::Status::kNeedMore) {
      d.end = Delivery::End::kShort;
      return d;
    }
    if (status == FrameReader::Status::kError) {
      d.end = Delivery::End::kMalformed;
      return d;
    }
    d.consumed += used;
    policy.on_header(header);
    if (!sink) break;
    batch.feed(sink);
    if (!sink->on_frame(header, payload)) {
      batch.refused();
      if (policy.after_refusal()) continue;
      d.end = Delivery::End::kRefused;
      return d;
    }
    if (!policy.after_frame()) break;
  }
  d.end = Delivery::End::kStopped;
  return d;
}

}  // namespace rdmagw::tunnel
