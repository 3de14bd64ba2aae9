// SPDX-License-Identifier: Apache-2.0
#pragma once
// Tunnel frames over one TCP connection. Sends gather queued frames into one
// sendmsg (one in flight at a time, so frames never reorder); receives land
// in a per-connection buffer that is parsed in place. That buffer is
// kHandshakeReceiveSize until the peer is admitted (Transport::admit()),
// then large enough for several of the largest frames.
//
// Splice (tunnel.tcp_splice, off by default: docs/architecture.md says
// what it measured): when a receive ends inside a large DATA frame, the
// rest of its payload moves by splice(2) into a pipe and from there into
// the application's socket (the stream does that part,
// LocalStream::on_peer_piped): no copy through user space.
// A peer sends whole frames, so receives tend to end on frame boundaries:
// after a large DATA frame the next header is read alone, so that the
// payload behind it stays in the socket and can be piped whole, for as
// long as frames keep qualifying.
//
// Encrypted (tunnel.auth.encrypt, after the handshake), the bytes each way
// are records: | length u32 (ciphertext and tag) | ciphertext | tag 16 |,
// at most kRecordSize bytes of the frame stream each, the length
// authenticated with them. Sealing reads the queued frames where they are
// and writes the records to a send buffer (the encryption is the only
// pass over the bytes); opening decrypts straight into the buffer the
// frames are parsed from.
//
// Why one class of this size (about 30 methods): the Transport seam's
// contract, the receive buffer, splice, and sealing all act on one socket
// and its one send and one receive in flight.
#include <sys/socket.h>
#include <sys/uio.h>

#include <memory>
#include <string>

#include "common/byte_queue.h"
#include "common/splice_pipe.h"
#include "common/unique_fd.h"
#include "proxy/io/event_loop.h"
#include "proxy/tunnel/transport.h"

namespace rdmagw::transport {

// Room for a handshake's frames (several times the largest) while the peer
// has proved nothing.
inline constexpr size_t kHandshakeReceiveSize = 4096;
static_assert(kHandshakeReceiveSize >= 4 * tunnel::kMaxHandshakeFrameSize);
// A certificate and its signature come together, before admission.
static_assert(kHandshakeReceiveSize >=
              2 * tunnel::kHeaderSize + 8 + tunnel::kMaxCertificateSize + tunnel::kMaxSignatureSize);
// Frame-stream bytes per record, and the bytes a record adds.
inline constexpr size_t kRecordSize = 16 * 1024;
inline constexpr size_t kRecordOverhead = 4 + tunnel::kCipherTagSize;

class TcpTransport final : public tunnel::Transport, public Flushable {
 public:
  // `max_data` bounds DATA frames accepted from the peer (our buffer size).
  // `splice`: large DATA payloads may pass by splice (see above).
  TcpTransport(EventLoop& loop, BufferPool& pool, UniqueFd fd, uint32_t max_data, std::string remote, bool splice);

  tunnel::TransportKind kind() const override { return tunnel::TransportKind::kTcp; }
  void start(tunnel::TransportSink* sink) override;
  void rebind(tunnel::TransportSink* sink) override { sink_ = sink; }
  tunnel::Outbound& outbound() override { return outbound_; }
  void request_send() override;
  void close(tunnel::CloseMode mode) override;
  std::string remote_address() const override { return remote_; }
  bool hand_off(std::function<void(tunnel::MovedConnection)> done) override;
  bool protect(const tunnel::CipherKey& send, const tunnel::CipherKey& receive, tunnel::Protection protection,
               std::string* error) override;
  bool addresses(IpBytes* local, IpBytes* remote) const override;
  // A connection another worker encrypted: its ciphers go on here.
  // An admitted connection that arrived from another worker takes its full
  // receive buffer before start(); false (and closed) without memory.
  bool take_full_buffers() { return grow_receive_buffer(); }
  // False when there is no memory for the record buffers.
  bool adopt_ciphers(std::shared_ptr<tunnel::FrameCipher> sealer, std::shared_ptr<tunnel::FrameCipher> opener);

  void describe(tunnel::SessionInfo* info) const override { info->spliced_bytes = spliced_bytes_; }

  void flush() override;

 private:
  ~TcpTransport() override = default;
  void on_admitted() override { grow_ = true; }
  // Takes the full receive buffer once admitted (never while a receive is
  // posted into the small one); false when there is no memory for it.
  bool grow_receive_buffer();
  void post_recv();
  void on_recv(int res, uint32_t flags);
  // Parses and delivers the frames in buf[0, len); returns the bytes used.
  // Stops early when the transport closes, hands off, or starts opening
  // records (the bytes after that frame are not frames).
  size_t deliver_frames(uint8_t* buf, size_t len);
  // Receives that end inside a DATA frame of at least this many missing
  // payload bytes pipe them; below it a copy costs less than the splices.
  static constexpr size_t kMinPipedBytes = 8 * 1024;
  // Frames piped (and headers read alone) in one go before the loop gets
  // its turn back.
  static constexpr int kMaxPipedInARow = 32;
  // The frames in rx_, then whole DATA frames by splice while they come:
  // returns the bytes of rx_ used.
  size_t deliver_received();
  // Pipes the DATA frame that starts at rx_[offset] and ends in the socket,
  // if it qualifies: kPiped, it was delivered (rx_ is used up); kTakenBack,
  // it was not, but bytes that went into the pipe are appended to rx_.
  enum class PipeOutcome { kNo, kPiped, kTakenBack };
  PipeOutcome pipe_frame(size_t offset);
  // Opens the whole records in rx_ from `offset` into plain_ and delivers
  // their frames; returns the offset in rx_ of what is left.
  size_t open_records(size_t offset);
  // Seals queued bytes into records in tx_, as many as fit.
  bool seal_records();
  // Counts `n` bytes as sent, from the plain prefix, or from tx_.
  void account_sent(size_t n);
  bool unsent() const { return !outbound_.empty() || tx_sent_ < tx_len_; }
  void on_send(int res, uint32_t flags);
  void on_flush_timeout(int res, uint32_t flags);
  // Ends a clean close: stop sending and reading (the owner retired us: freed once idle).
  void end_lingering();
  using Loss = metrics::TransportLoss;
  void fail(Loss loss, std::string reason);
  // The hand-off completes once no send is in flight and the receive ended.
  void finish_hand_off();

  static constexpr int kMaxIov = 64;

  UniqueFd fd_;
  std::string remote_;
  tunnel::FrameReader reader_;
  tunnel::TransportSink* sink_ = nullptr;
  tunnel::Outbound outbound_;
  std::unique_ptr<uint8_t[]> rx_;
  size_t rx_capacity_ = kHandshakeReceiveSize;
  size_t rx_full_capacity_;  // once admitted
  bool grow_ = false;        // admitted: grow before the next receive
  size_t rx_len_ = 0;
  size_t rx_asked_ = 0;      // what the posted receive may take
  bool rx_drained_ = false;  // the last receive took less: the socket was empty after it
  iovec iov_[kMaxIov];
  msghdr msg_{};
  IoOp recv_op_;
  IoOp send_op_;
  IoOp flush_timer_op_;
  __kernel_timespec flush_timeout_{};
  bool sending_ = false;
  bool closed_ = false;
  bool flushing_on_close_ = false;  // closed, but queued frames still go out first
  // A clean close (close(kFlush)) in progress: after our frames and FIN, we
  // read and drop until the peer's FIN, for at most kCloseFlushSeconds. Closing with its
  // bytes unread would answer them with a reset, which can cost the peer
  // data it has received but not yet read.
  bool lingering_ = false;
  std::function<void(tunnel::MovedConnection)> hand_off_;  // set while the socket is handed to another worker
  size_t hand_off_unread_ = 0;                             // bytes received after the frame that asked for it

  // Splice (null pipe until the first frame that qualifies).
  bool splice_;
  SplicePipe pipe_;
  bool header_only_ = false;            // the next receive takes a header alone (deliver_received)
  bool last_frame_large_data_ = false;  // the last frame parsed was DATA of kMinPipedBytes or more
  uint64_t spliced_bytes_ = 0;

  // Encryption (null until the handshake turns it on).
  std::shared_ptr<tunnel::FrameCipher> sealer_, opener_;
  bool opening_started_ = false;   // set mid-delivery: the rest of rx_ is records
  size_t plain_prefix_ = 0;        // queued before sealing began: sent as it is
  bool sending_plain_ = false;     // the send in flight is from that prefix
  std::unique_ptr<uint8_t[]> tx_;  // sealed records
  size_t tx_capacity_ = 0, tx_len_ = 0, tx_sent_ = 0;
  std::unique_ptr<uint8_t[]> plain_;  // opened bytes, parsed as frames
  size_t plain_len_ = 0;
};

}  // namespace rdmagw::transport
