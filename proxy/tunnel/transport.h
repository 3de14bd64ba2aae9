#pragma once
// The seam between the tunnel (frames, streams, flow control) and the bytes
// carrier underneath. TCP today, RDMA next: both carry the same frames.
#include <span>
#include <string>
#include <string_view>

#include "common/byte_queue.h"
#include "proxy/admin/admin_model.h"
#include "proxy/tunnel/frame.h"

namespace rdmagw::tunnel {

// Implemented by the session: frames arrive here.
class TransportSink {
 public:
  virtual ~TransportSink() = default;
  // A whole, header-validated frame. Returns false when the session has
  // closed the transport (the transport then stops delivering).
  virtual bool on_frame(const FrameHeader& header, std::span<const uint8_t> payload) = 0;
  // The carrier failed or the peer closed it. Called at most once.
  virtual void on_transport_closed(std::string_view reason) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view kind() const = 0;  // "tcp" or "rdma"
  virtual void start(TransportSink* sink) = 0;
  // Frames are written here by the session; the transport owns the queue so
  // that buffers stay alive while a send is in flight, even past close().
  virtual ByteQueue& outbound() = 0;
  // New bytes are in outbound(); they leave at the end of this loop batch.
  virtual void request_send() = 0;
  // Stops all I/O. The transport frees itself once its operations finish;
  // the caller must not touch it afterwards and the sink is never called again.
  // With `flush`, frames already queued still go out first (bounded in time):
  // used when a session ends cleanly, never when the peer misbehaves.
  virtual void close(bool flush) = 0;
  void close() { close(false); }
  virtual std::string remote_address() const = 0;
  // Fills in what this carrier knows beyond the session (RDMA: QP, credits).
  virtual void describe(admin::SessionInfo*) const {}
};

}  // namespace rdmagw::tunnel
