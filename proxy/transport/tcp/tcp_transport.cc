// SPDX-License-Identifier: Apache-2.0
#include "proxy/transport/tcp/tcp_transport.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

#include "common/log.h"
#include "proxy/tunnel/frame_delivery.h"

namespace rdmagw::transport {

TcpTransport::TcpTransport(EventLoop& loop, BufferPool& pool, UniqueFd fd, uint32_t max_data, std::string remote,
                           bool splice)
    : tunnel::Transport(loop),
      fd_(std::move(fd)),
      remote_(std::move(remote)),
      reader_(max_data),
      outbound_(&pool),
      // Room for several of the largest frames, so a full buffer always
      // holds at least one whole frame to parse.
      rx_full_capacity_(std::max<size_t>(256 * 1024, 4 * (tunnel::kHeaderSize + tunnel::kMaxOpenPrefix + max_data))),
      splice_(splice) {
  rx_ = std::make_unique<uint8_t[]>(rx_capacity_);
  recv_op_ = IoOp::bind<&TcpTransport::on_recv>(this);
  send_op_ = IoOp::bind<&TcpTransport::on_send>(this);
  flush_timer_op_ = IoOp::bind<&TcpTransport::on_flush_timeout>(this);
}

void TcpTransport::start(tunnel::TransportSink* sink) {
  sink_ = sink;
  if (!grow_receive_buffer()) return;
  post_recv();
}

bool TcpTransport::grow_receive_buffer() {
  if (!grow_) return true;
  grow_ = false;
  // Memory a peer makes us take is asked for without throwing: a failure
  // ends this connection, not the process.
  std::unique_ptr<uint8_t[]> bigger(new (std::nothrow) uint8_t[rx_full_capacity_]);
  if (!bigger) {
    log::warn("session_error").kv("remote", remote_).kv("reason", "out of memory for the receive buffer");
    fail(Loss::kLocalError, "out of memory for the receive buffer");
    return false;
  }
  std::memcpy(bigger.get(), rx_.get(), rx_len_);
  rx_ = std::move(bigger);
  rx_capacity_ = rx_full_capacity_;
  return true;
}

void TcpTransport::post_recv() {
  size_t room = rx_capacity_ - rx_len_;
  // After a piped frame only the next header is read, so that the payload
  // behind it stays in the socket for splice.
  if (header_only_ && rx_len_ < tunnel::kHeaderSize) room = tunnel::kHeaderSize - rx_len_;
  io_uring_sqe* s = loop().sqe(&recv_op_);
  io_uring_prep_recv(s, fd_.get(), rx_.get() + rx_len_, room, 0);
  // As a stream's receive (socket_receive.cc): after one that emptied the
  // socket, wait for bytes before the first attempt.
  if (rx_drained_ && loop().features().poll_first) s->ioprio |= IORING_RECVSEND_POLL_FIRST;
  rx_asked_ = room;
}

void TcpTransport::request_send() {
  if (!closed_) loop().request_flush(this);
}

void TcpTransport::flush() {
  if ((closed_ && !flushing_on_close_) || sending_) return;
  if (sealer_ && plain_prefix_ == 0) {
    if (tx_sent_ == tx_len_) {
      tx_len_ = tx_sent_ = 0;
      if (!seal_records()) return;
    }
    if (tx_sent_ == tx_len_) return;
    io_uring_sqe* s = loop().sqe(&send_op_);
    io_uring_prep_send(s, fd_.get(), tx_.get() + tx_sent_, tx_len_ - tx_sent_, MSG_NOSIGNAL);
    sending_ = true;
    sending_plain_ = false;
    return;
  }
  if (outbound_.empty()) return;
  int n = outbound_.iovecs_at(0, iov_, kMaxIov);
  if (sealer_) {
    // Only the bytes queued before sealing began go out as they are.
    size_t left = plain_prefix_;
    int i = 0;
    for (; i < n && left > 0; ++i) {
      iov_[i].iov_len = std::min(iov_[i].iov_len, left);
      left -= iov_[i].iov_len;
    }
    n = i;
  }
  msg_ = {};
  msg_.msg_iov = iov_;
  msg_.msg_iovlen = static_cast<size_t>(n);
  io_uring_sqe* s = loop().sqe(&send_op_);
  io_uring_prep_sendmsg(s, fd_.get(), &msg_, MSG_NOSIGNAL);
  sending_ = true;
  sending_plain_ = true;
}

bool TcpTransport::seal_records() {
  while (!outbound_.empty() && tx_capacity_ - tx_len_ >= kRecordSize + kRecordOverhead) {
    int n = outbound_.iovecs_at(0, iov_, kMaxIov);
    size_t take = 0;
    int used = 0;
    for (; used < n && take < kRecordSize; ++used) {
      iov_[used].iov_len = std::min(iov_[used].iov_len, kRecordSize - take);
      take += iov_[used].iov_len;
    }
    uint8_t* record = tx_.get() + tx_len_;
    tunnel::put_u32(record, static_cast<uint32_t>(take + tunnel::kCipherTagSize));
    if (!sealer_->seal(std::span<const iovec>(iov_, static_cast<size_t>(used)), std::span<const uint8_t>(record, 4),
                       record + 4)) {
      fail(Loss::kLocalError, "sealing a record failed (OpenSSL)");
      return false;
    }
    tx_len_ += take + kRecordOverhead;
    outbound_.consume(take);  // in the record now
  }
  return true;
}

void TcpTransport::account_sent(size_t n) {
  if (sending_plain_) {
    outbound_.consume(n);
    plain_prefix_ -= std::min(plain_prefix_, n);
  } else {
    tx_sent_ += n;
  }
}

bool TcpTransport::addresses(IpBytes* local, IpBytes* remote) const {
  sockaddr_storage a{}, b{};
  socklen_t la = sizeof(a), lb = sizeof(b);
  return fd_.valid() && getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &la) == 0 &&
         getpeername(fd_.get(), reinterpret_cast<sockaddr*>(&b), &lb) == 0 &&
         ip_bytes_of(reinterpret_cast<sockaddr*>(&a), la, local) &&
         ip_bytes_of(reinterpret_cast<sockaddr*>(&b), lb, remote);
}

bool TcpTransport::protect(const tunnel::CipherKey& send, const tunnel::CipherKey& receive,
                           tunnel::Protection protection, std::string* error) {
  auto sealer = tunnel::FrameCipher::create(send, tunnel::FrameCipher::Use::kSeal, protection, error);
  auto opener =
      sealer ? tunnel::FrameCipher::create(receive, tunnel::FrameCipher::Use::kOpen, protection, error) : nullptr;
  if (!opener) return false;
  if (!adopt_ciphers(std::move(sealer), std::move(opener))) {
    *error = "out of memory for the record buffers";
    return false;
  }
  opening_started_ = true;           // the rest of this receive is records
  plain_prefix_ = outbound_.size();  // what is queued already goes out as it is
  return true;
}

bool TcpTransport::adopt_ciphers(std::shared_ptr<tunnel::FrameCipher> sealer,
                                 std::shared_ptr<tunnel::FrameCipher> opener) {
  // Asked for without throwing, like the receive buffer: a failure ends
  // this connection only.
  tx_capacity_ = 4 * (kRecordSize + kRecordOverhead);
  tx_.reset(new (std::nothrow) uint8_t[tx_capacity_]);
  plain_.reset(new (std::nothrow) uint8_t[rx_full_capacity_]);
  if (!tx_ || !plain_) return false;
  sealer_ = std::move(sealer);
  opener_ = std::move(opener);
  return true;
}

void TcpTransport::fail(Loss loss, std::string reason) {
  if (closed_) return;
  tunnel::TransportSink* sink = sink_;
  sink_ = nullptr;
  // The sink closes us in response; if it does not, close anyway.
  if (sink) sink->on_transport_closed(loss, reason);
  close(tunnel::CloseMode::kAbort);
}

bool TcpTransport::hand_off(std::function<void(tunnel::MovedConnection)> done) {
  if (closed_) return false;
  // Called mid-parse (the frame that asks to move); on_recv finishes it.
  hand_off_ = std::move(done);
  closed_ = true;
  sink_ = nullptr;
  return true;
}

void TcpTransport::finish_hand_off() {
  if (sending_) return;  // on_send comes back here
  auto done = std::move(hand_off_);
  hand_off_ = nullptr;
  if (hand_off_unread_ > 0) {
    // The peer did not wait for the answer: bytes it sent would be lost
    // with this buffer. Closing makes it try again.
    log::warn("session_error").kv("remote", remote_).kv("reason", "frames after a resume request, before its answer");
    ::shutdown(fd_.get(), SHUT_RDWR);
    return;
  }
  done(tunnel::MovedConnection{std::move(fd_), sealer_, opener_});
}

void TcpTransport::on_recv(int res, uint32_t) {
  rx_drained_ = res == -EAGAIN || (res > 0 && static_cast<size_t>(res) < rx_asked_);
  if (closed_) {
    if (lingering_ && (res > 0 || res == -EINTR || res == -EAGAIN)) {
      rx_len_ = 0;  // dropped: the session is gone
      post_recv();
    } else if (lingering_) {
      // The peer's FIN (or an error): the connection can go.
      end_lingering();
    }
    return;  // otherwise cancelled on close; the fd closes with the object
  }
  if (res <= 0) {
    if (res == -EINTR || res == -EAGAIN) {
      post_recv();
      return;
    }
    fail(res == 0 ? Loss::kPeerClosed : Loss::kIoError,
         res == 0 ? "peer closed the connection" : std::string("recv: ") + strerror(-res));
    return;
  }
  rx_len_ += static_cast<size_t>(res);
  size_t offset = opener_ ? 0 : deliver_received();
  if (opener_ && !closed_) offset = open_records(offset);
  if (hand_off_) {
    hand_off_unread_ = rx_len_ - offset + plain_len_;
    finish_hand_off();
    return;
  }
  if (closed_) {
    // Closed cleanly by a frame of this batch: keep reading (and dropping)
    // until the peer's FIN, as a clean close does.
    if (lingering_) {
      rx_len_ = 0;
      post_recv();
    }
    return;
  }
  // Keep the partial frame at the front; it is at most one frame long.
  if (offset > 0) {
    std::memmove(rx_.get(), rx_.get() + offset, rx_len_ - offset);
    rx_len_ -= offset;
  }
  if (!grow_receive_buffer()) return;
  if (rx_len_ == rx_capacity_) {
    // Only before admission can a frame not fit (the full buffer holds
    // several of the largest): no handshake frame is this long.
    // Not logged here: the session's (rate-limited) close line says it.
    fail(Loss::kProtocolError,
         "protocol error: a frame longer than " + std::to_string(rx_capacity_) + " bytes before the handshake ended");
    return;
  }
  post_recv();
}

size_t TcpTransport::deliver_frames(uint8_t* buf, size_t len) {
  // A byte stream: frames may end short, to be completed by the next
  // receive. Delivery stops where the records start (a HELLO turned
  // protection on: what follows is sealed).
  struct Policy {
    TcpTransport& t;
    bool was_opening;
    bool closed() const { return t.closed_; }
    void on_header(const tunnel::FrameHeader& header) {
      t.last_frame_large_data_ = header.type == tunnel::FrameType::kData && header.length >= kMinPipedBytes;
    }
    bool after_frame() const { return t.opening_started_ == was_opening; }
    bool after_refusal() const { return false; }
  } policy{*this, opening_started_};
  tunnel::Delivery d = tunnel::deliver_frames(reader_, {buf, len}, sink_, policy);
  if (d.end == tunnel::Delivery::End::kMalformed) {
    // Before admission the session's close line says it, rate-limited:
    // a peer that proved nothing must not be able to fill the log.
    if (admitted()) log::warn("session_error").kv("remote", remote_).kv("reason", "malformed frame: " + d.reason);
    fail(Loss::kProtocolError, "protocol error: " + d.reason);
  }
  return d.consumed;
}

size_t TcpTransport::deliver_received() {
  size_t offset = deliver_frames(rx_.get(), rx_len_);
  // Bulk data: the peer sends whole frames, so receives end on frame
  // boundaries. After a large DATA frame, the next header is read alone,
  // so that the payload behind it can be piped.
  header_only_ = splice_ && last_frame_large_data_ && offset == rx_len_;
  for (int piped = 0; piped < kMaxPipedInARow; ++piped) {
    PipeOutcome outcome = pipe_frame(offset);
    if (outcome == PipeOutcome::kTakenBack) offset += deliver_frames(rx_.get() + offset, rx_len_ - offset);
    if (outcome != PipeOutcome::kPiped) break;
    // rx_ is used up. The next frame's header alone, if it is here already;
    // if not, the next receive waits for it.
    rx_len_ = offset = 0;
    header_only_ = true;
    if (closed_) break;
    ssize_t got = ::recv(fd_.get(), rx_.get(), tunnel::kHeaderSize, MSG_DONTWAIT);
    if (got <= 0) break;  // nothing yet, or the end or an error, which the posted receive meets
    rx_len_ = static_cast<size_t>(got);
    offset = deliver_frames(rx_.get(), rx_len_);  // frames without payload are whole already
  }
  return offset;
}

TcpTransport::PipeOutcome TcpTransport::pipe_frame(size_t offset) {
  if (!splice_ || closed_ || hand_off_ || sealer_ || opener_ || opening_started_ || !sink_) return PipeOutcome::kNo;
  tunnel::FrameHeader header;
  std::span<const uint8_t> payload;
  size_t consumed = 0;
  std::string reason;
  // deliver_frames() stopped here for want of bytes: the header is whole
  // and valid, or there is none yet.
  if (reader_.next(rx_.get() + offset, rx_len_ - offset, &header, &payload, &consumed, &reason) !=
          tunnel::FrameReader::Status::kNeedMore ||
      rx_len_ - offset < tunnel::kHeaderSize || header.type != tunnel::FrameType::kData)
    return PipeOutcome::kNo;
  size_t head = rx_len_ - offset - tunnel::kHeaderSize;
  size_t missing = header.length - head;
  if (missing < kMinPipedBytes || !sink_->takes_piped_frames()) return PipeOutcome::kNo;
  if (!pipe_.is_open()) {
    std::string error;
    if (!pipe_.open(reader_.max_data(), &error)) {
      static std::atomic<bool> logged{false};
      if (!logged.exchange(true))
        log::warn("splice_unavailable")
            .kv("remote", remote_)
            .kv("reason", error)
            .kv("note", "copying instead; logged once");
      splice_ = false;
      return PipeOutcome::kNo;
    }
  }
  // Room to take the bytes back into rx_ if they do not all come.
  if (missing > pipe_.capacity() || missing > rx_capacity_ - rx_len_) return PipeOutcome::kNo;
  // The whole rest of the frame into the pipe, or none of it delivered:
  // the frame is then handed over whole, and nothing waits half-piped.
  size_t in = 0;
  while (in < missing) {
    ssize_t n =
        ::splice(fd_.get(), nullptr, pipe_.write_end(), nullptr, missing - in, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
    if (n <= 0) {
      // A kernel that cannot splice this socket: copy from now on.
      if (n < 0 && errno != EAGAIN && errno != EINTR) splice_ = false;
      break;
    }
    in += static_cast<size_t>(n);
  }
  if (in < missing) {
    // Not all of it has arrived (or the socket's pages did not all fit the
    // pipe): take back what went in (rx_ has room for several frames) and
    // carry on by copying.
    ssize_t back = in > 0 ? ::read(pipe_.read_end(), rx_.get() + rx_len_, in) : 0;
    if (back != static_cast<ssize_t>(in)) {
      fail(Loss::kIoError, "splice: bytes put in the pipe could not be read back");
      return PipeOutcome::kNo;
    }
    rx_len_ += in;
    return PipeOutcome::kTakenBack;
  }
  spliced_bytes_ += missing;
  tunnel::FrameBatch batch;
  batch.feed(sink_);
  std::span<const uint8_t> head_bytes(rx_.get() + offset + tunnel::kHeaderSize, head);
  if (!sink_->on_piped_frame(header, head_bytes, pipe_.read_end(), static_cast<uint32_t>(missing))) {
    batch.refused();
    pipe_ = SplicePipe();  // it may still hold the payload; the transport is closed anyway
  }
  return PipeOutcome::kPiped;
}

size_t TcpTransport::open_records(size_t offset) {
  opening_started_ = false;
  while (!closed_ && !hand_off_ && rx_len_ - offset >= 4) {
    uint32_t sealed = tunnel::get_u32(rx_.get() + offset);
    if (sealed < tunnel::kCipherTagSize || sealed > kRecordSize + tunnel::kCipherTagSize) {
      fail(Loss::kProtocolError, "protocol error: a record of " + std::to_string(sealed) + " bytes");
      break;
    }
    if (rx_len_ - offset < 4 + size_t{sealed}) break;  // the rest comes later
    size_t plain = sealed - tunnel::kCipherTagSize;
    if (rx_full_capacity_ - plain_len_ < plain) break;  // frames first (cannot happen: a frame fits)
    if (!opener_->open(std::span<const uint8_t>(rx_.get() + offset + 4, sealed),
                       std::span<const uint8_t>(rx_.get() + offset, 4), plain_.get() + plain_len_)) {
      const char* why = "a record does not authenticate (altered, replayed, reordered or not from our peer)";
      if (admitted()) log::warn("session_error").kv("remote", remote_).kv("reason", why);
      fail(Loss::kProtocolError, std::string("protocol error: ") + why);
      break;
    }
    offset += 4 + sealed;
    plain_len_ += plain;
    size_t used = deliver_frames(plain_.get(), plain_len_);
    if (used > 0) {
      std::memmove(plain_.get(), plain_.get() + used, plain_len_ - used);
      plain_len_ -= used;
    }
  }
  return offset;
}

void TcpTransport::on_flush_timeout(int res, uint32_t) {
  if (res != -ECANCELED && lingering_) {
    // The peer did not take our last frames, or did not close, in time.
    end_lingering();
  }
}

void TcpTransport::end_lingering() {
  lingering_ = false;
  flushing_on_close_ = false;
  ::shutdown(fd_.get(), SHUT_RDWR);
  loop().cancel(&send_op_);
  loop().cancel(&recv_op_);
  loop().cancel(&flush_timer_op_);
}

void TcpTransport::on_send(int res, uint32_t) {
  sending_ = false;
  if (hand_off_) {
    finish_hand_off();
    return;
  }
  if (closed_ && flushing_on_close_) {
    if (res > 0) account_sent(static_cast<size_t>(res));
    bool retry = res > 0 || res == -EINTR || res == -EAGAIN;
    if (retry && unsent()) {
      flush();
    } else {
      // Everything queued is in the kernel: SHUT_WR lets it deliver that,
      // then FIN; we keep reading until the peer's FIN. A failed send ends
      // the close at once.
      flushing_on_close_ = false;
      if (!retry)
        end_lingering();
      else
        ::shutdown(fd_.get(), SHUT_WR);
    }
    return;
  }
  if (closed_) return;
  if (res < 0) {
    if (res == -EINTR || res == -EAGAIN) {
      flush();
      return;
    }
    fail(Loss::kIoError, std::string("send: ") + strerror(-res));
    return;
  }
  account_sent(static_cast<size_t>(res));
  flush();
}

void TcpTransport::close(tunnel::CloseMode mode) {
  if (closed_) return;
  bool flush_first = mode == tunnel::CloseMode::kFlush;
  closed_ = true;
  sink_ = nullptr;
  // On a clean ending, frames already queued (a last FIN, a GOAWAY, trailing
  // DATA) still go out, for at most kCloseFlushSeconds: a peer that does not read
  // cannot hold the connection and its buffers.
  if (flush_first && ops_in_flight() > 0) {
    // The receive stays posted: on_recv drops what arrives until the FIN.
    lingering_ = true;
    flushing_on_close_ = unsent() || sending_;
    if (flushing_on_close_) {
      if (!sending_) flush();
    } else {
      ::shutdown(fd_.get(), SHUT_WR);
    }
    flush_timeout_.tv_sec = tunnel::kCloseFlushSeconds;
    io_uring_sqe* s = loop().sqe(&flush_timer_op_);
    io_uring_prep_timeout(s, &flush_timeout_, 0, 0);
    return;
  }
  if (sending_) {
    // Abortive: the pending send is abandoned.
    ::shutdown(fd_.get(), SHUT_RDWR);
    loop().cancel(&send_op_);
  }
  // shutdown(SHUT_WR) sends FIN after what the kernel holds; cancelling the
  // receive releases the last operation.
  ::shutdown(fd_.get(), SHUT_WR);
  loop().cancel(&recv_op_);
}

}  // namespace rdmagw::transport
