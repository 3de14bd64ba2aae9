// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/takeover_image.h"

#include <cstring>

#include "common/protocol_limits.h"
#include "proxy/local/bpf/local_redirect_shared.h"

namespace rdmagw {

namespace {

// Version 1 images come from an rdmagw whose tunnel.buffer_size default was
// 16 KiB (tunnel::kVersion1DefaultMaxData).
constexpr uint32_t kImageVersion = kTakeoverImageVersion;
constexpr uint32_t kOldestImageVersion = kOldestTakeoverImageVersion;
constexpr size_t kMaxString = 4096;
constexpr size_t kMaxBytes = size_t{1} << 30;  // one session's kept frames at most
constexpr size_t kMaxCount = size_t{1} << 24;

// The image is written and read by the same field lists (session_fields,
// stream_fields, pipe_fields below): each names a field once, in wire order,
// and runs with a Writer (encoding) or a Reader (decoding), so that a field
// added is one line, and a field of a newer version is read exactly where it
// is written. Checks of what was read follow each list, on the reading side.

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
  void u8(const uint8_t& v) { out_->push_back(v); }
  void flag(const bool& v) { out_->push_back(v ? 1 : 0); }
  void u32(const uint32_t& v) { le(v, 4); }
  void u32(const uint16_t& v) { le(v, 4); }
  void u32(const int32_t& v) { le(static_cast<uint32_t>(v), 4); }
  void u64(const uint64_t& v) { le(v, 8); }
  void text(const std::string& s, const char*) { bytes(s.data(), s.size()); }
  void blob(const std::vector<uint8_t>& v, const char*) { bytes(v.data(), v.size()); }
  void u32_list(const std::vector<uint32_t>& v, const char*) {
    u64(v.size());
    for (uint32_t x : v) u32(x);
  }
  void count(size_t n, const char*) { u64(n); }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_->push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void bytes(const void* p, size_t n) {
    u64(n);
    auto* b = static_cast<const uint8_t*>(p);
    out_->insert(out_->end(), b, b + n);
  }
  std::vector<uint8_t>* out_;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  bool fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
  }
  void u8(uint8_t& v) { v = need(1) ? *p_++ : 0; }
  void flag(bool& v) {
    uint8_t b = 0;
    u8(b);
    if (b > 1) fail("a flag is neither 0 nor 1");
    v = b == 1;
  }
  void u32(uint32_t& v) { v = static_cast<uint32_t>(le(4)); }
  void u32(uint16_t& v) {
    uint64_t x = le(4);
    if (x > 0xffff) fail("a 16-bit value (the protocol version) out of range");
    v = static_cast<uint16_t>(x);
  }
  void u32(int32_t& v) { v = static_cast<int32_t>(static_cast<uint32_t>(le(4))); }
  void u64(uint64_t& v) { v = le(8); }
  void text(std::string& s, const char* what) {
    uint64_t n = le(8);
    if (n > kMaxString) {
      fail(std::string(what) + " is longer than " + std::to_string(kMaxString) + " bytes");
      return;
    }
    if (!need(n)) return;
    s.assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
  }
  void blob(std::vector<uint8_t>& v, const char* what) {
    uint64_t n = le(8);
    if (n > kMaxBytes) {
      fail(std::string(what) + " is larger than 1 GiB");
      return;
    }
    if (!need(n)) return;
    v.assign(p_, p_ + n);
    p_ += n;
  }
  void u32_list(std::vector<uint32_t>& v, const char* what) {
    size_t n = count(what);
    for (size_t i = 0; i < n && ok(); ++i) v.push_back(static_cast<uint32_t>(le(4)));
  }
  size_t count(const char* what) {
    uint64_t n = le(8);
    // Every element takes at least one byte: a count beyond what is left is a lie.
    if (n > kMaxCount || n > static_cast<uint64_t>(end_ - p_)) {
      fail(std::string("implausible count of ") + what + ": " + std::to_string(n));
      return 0;
    }
    return static_cast<size_t>(n);
  }
  bool at_end() const { return p_ == end_; }

 private:
  uint64_t le(int n) {
    if (!need(static_cast<uint64_t>(n))) return 0;
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{p_[i]} << (8 * i);
    p_ += n;
    return v;
  }
  bool need(uint64_t n) {
    if (!ok()) return false;
    if (n > static_cast<uint64_t>(end_ - p_)) return fail("the image ends early");
    return true;
  }
  const uint8_t* p_;
  const uint8_t* end_;
  std::string error_;
};

// IO is Writer or Reader; T is the image, const when writing.
template <typename IO, typename T>
void stream_tunnel_fields(IO& io, T& t) {
  io.u32(t.id);
  io.u64(t.send_available);
  io.u64(t.receive_size);
  io.u64(t.receive_remaining);
  io.u64(t.receive_pending);
  io.flag(t.fin_sent);
  io.flag(t.fin_received);
  io.flag(t.wants_credit);
}

void check_stream_tunnel(Reader& r, const tunnel::StreamTunnelImage& t) {
  if (t.receive_remaining > t.receive_size || t.receive_pending > t.receive_size - t.receive_remaining)
    r.fail("stream " + std::to_string(t.id) + ": its receive window does not add up");
}

template <typename IO, typename T>
void session_fields(IO& io, T& s, uint32_t image_version) {
  io.flag(s.dialer);
  io.text(s.peer_label, "peer name");
  io.text(s.peer_node, "peer node");
  io.u32(s.peer_hello.version);
  io.u32(s.peer_hello.capabilities);
  io.u32(s.peer_hello.max_data);
  io.u32(s.peer_hello.stream_window);
  io.u64(s.peer_hello.session_window);
  io.text(s.peer_hello.node, "peer HELLO node");
  if (image_version >= 2) {
    io.u32(s.own_max_data);
    io.u32(s.own_stream_window);
    io.u64(s.own_session_window);
  }
  if (image_version >= 4) io.u32(s.own_capabilities);
  io.u64(s.token.instance);
  io.u64(s.token.nonce);
  io.u64(s.received);
  io.u64(s.ack_sent);
  io.u64(s.peer_acked);
  io.u64(s.frames_base);
  io.blob(s.frames, "kept frames");
  io.u32(s.next_local_id);
  io.u32(s.highest_remote_id);
  io.u64(s.session_send_available);
  io.u64(s.session_send_reserve);
  io.u64(s.session_receive_size);
  io.u64(s.session_receive_remaining);
  io.u64(s.session_receive_pending);
  io.flag(s.goaway_sent);
  io.flag(s.goaway_received);
  io.u8(s.transport_kind);
  io.u64(s.age_ms);
  io.u64(s.frames_in);
  io.u64(s.frames_out);
  io.u64(s.bytes_in);
  io.u64(s.bytes_out);
  io.u64(s.streams_opened);
  io.u64(s.resumes);
  io.u64(s.resent_bytes);
  io.u32_list(s.blocked, "blocked streams");
}

void check_session(Reader& r, const tunnel::SessionImage& s, uint32_t image_version) {
  if (!r.ok()) return;
  // As a HELLO would be checked: the new process announces them again.
  if (image_version >= 2 && (s.own_max_data < kMaxDataMin || s.own_max_data > kMaxDataMax ||
                             s.own_stream_window < s.own_max_data || s.own_stream_window > kStreamWindowMax ||
                             s.own_session_window < s.own_stream_window || s.own_session_window > kSessionWindowMax))
    r.fail("session settings out of the protocol's limits");
  if (s.transport_kind > 1) r.fail("unknown transport kind " + std::to_string(s.transport_kind));
  if (s.peer_acked < s.frames_base || s.peer_acked - s.frames_base > s.frames.size())
    r.fail("the peer's acknowledged offset lies outside the kept frames");
  if (s.ack_sent > s.received) r.fail("more acknowledged than received");
  if (s.session_receive_remaining > s.session_receive_size ||
      s.session_receive_pending > s.session_receive_size - s.session_receive_remaining)
    r.fail("the session's receive window does not add up");
  if (s.session_send_reserve > s.peer_hello.session_window) r.fail("session credit reserve beyond the peer's window");
}

template <typename IO, typename T>
void leg_fields(IO& io, T& leg) {
  io.flag(leg.present);
  io.blob(leg.key, "a redirected leg's key");
  io.u32(leg.slot);  // -1 (0xffffffff on the wire): its read flow has no counter
  io.flag(leg.sender);
  io.flag(leg.by_tcp);
}

void check_leg(Reader& r, const local::RedirectedLegImage& leg) {
  if (!leg.present) {
    if (!leg.key.empty() || leg.slot != -1 || leg.sender || leg.by_tcp)
      r.fail("a stream without a leg says how it goes");
    return;
  }
  if (leg.key.size() != local::kRedirectedLegKeySize)
    r.fail("a redirected leg's key of " + std::to_string(leg.key.size()) + " bytes");
  if (leg.slot < -1 || leg.slot >= LOCAL_REDIRECT_MAX_SLOTS)
    r.fail("a redirected leg's read counter " + std::to_string(static_cast<uint32_t>(leg.slot)));
  if (leg.by_tcp && !leg.sender) r.fail("a redirected leg sends by TCP without sending");
}

template <typename IO, typename T>
void stream_fields(IO& io, T& s, uint32_t image_version) {
  io.u32(s.fd);
  io.u32(s.session);  // -1 (0xffffffff on the wire): no session
  io.flag(s.target_side);
  io.flag(s.opened);
  io.flag(s.connecting);
  io.flag(s.read_closed);
  io.flag(s.remote_fin);
  io.flag(s.write_shut);
  io.text(s.listener, "listener name");
  io.text(s.peer, "peer name");
  io.text(s.target, "target");
  io.u64(s.bytes_up);
  io.u64(s.bytes_down);
  io.u64(s.age_ms);
  io.blob(s.to_socket, "bytes for the socket");
  io.blob(s.parked, "parked bytes");
  stream_tunnel_fields(io, s.tunnel);
  if (image_version >= 3) leg_fields(io, s.leg);
  if (image_version >= 4) {
    io.blob(s.origin, "a stream's origin");
    io.text(s.client, "a stream's client");
    io.text(s.destination, "a stream's destination");
    io.text(s.remote, "a stream's remote");
    io.blob(s.proxy_header, "a stream's PROXY header");
    io.u64(s.session_wait_us);
    io.u64(s.connect_us);
    io.u64(s.first_byte_us);
  }
}

template <typename IO, typename T>
void pipe_fields(IO& io, T& p, uint32_t image_version) {
  io.u32(p.client_fd);
  io.u32(p.server_fd);
  io.flag(p.connecting);
  io.text(p.listener, "listener name");
  io.text(p.destination, "destination");
  io.blob(p.up, "pending bytes");
  io.blob(p.down, "pending bytes");
  io.flag(p.up_ended);
  io.flag(p.down_ended);
  if (image_version >= 4) {
    io.u64(p.age_ms);
    io.u64(p.connect_us);
    io.u64(p.first_byte_us);
  }
}

void put_connections(Writer& w, const local::HandoverImages& c, uint32_t version) {
  w.count(c.streams.size(), "streams");
  for (const auto& s : c.streams) stream_fields(w, s, version);
  w.count(c.pipes.size(), "passthrough connections");
  for (const auto& p : c.pipes) pipe_fields(w, p, version);
}

template <typename FdCheck>
void get_connections(Reader& r, local::HandoverImages* c, size_t sessions, FdCheck& fd_ok, uint32_t version) {
  size_t n = r.count("streams");
  for (size_t i = 0; i < n && r.ok(); ++i) {
    local::LocalStreamImage s;
    stream_fields(r, s, version);
    if (!r.ok()) break;
    fd_ok(s.fd);
    check_stream_tunnel(r, s.tunnel);
    check_leg(r, s.leg);
    tunnel::StreamOrigin origin;
    std::string why;
    if (!s.origin.empty() && !tunnel::decode_origin(s.origin, &origin, &why)) r.fail("a stream's origin: " + why);
    if (s.session < -1 || s.session >= static_cast<int64_t>(sessions))
      r.fail("a stream names session " + std::to_string(static_cast<uint32_t>(s.session)));
    if (s.session >= 0 && !s.opened) r.fail("a stream on a session that was never opened");
    // The flags are a stream's states (local_stream.h): no state has these.
    if (s.connecting && !s.opened) r.fail("a stream connecting to its target without a stream id");
    if (!s.proxy_header.empty() && !s.connecting) r.fail("a PROXY header for a stream no longer connecting");
    if (s.proxy_header.size() > 64) r.fail("a PROXY header of " + std::to_string(s.proxy_header.size()) + " bytes");
    if (s.write_shut && !s.remote_fin) r.fail("a stream shut towards its socket without the peer's FIN");
    // On a session, the peer's FIN is the session's record of it (what the
    // new process restores); the stream's own copy must say the same.
    if (s.session >= 0 && s.remote_fin != s.tunnel.fin_received)
      r.fail("a stream whose FIN from the peer differs from its session's record");
    c->streams.push_back(std::move(s));
  }
  n = r.count("passthrough connections");
  for (size_t i = 0; i < n && r.ok(); ++i) {
    local::PipeImage p;
    pipe_fields(r, p, version);
    if (!r.ok()) break;
    fd_ok(p.client_fd);
    fd_ok(p.server_fd);
    c->pipes.push_back(std::move(p));
  }
}

}  // namespace

namespace {

template <typename IO, typename T>
void listener_fields(IO& io, T& l) {
  io.text(l.endpoint, "listener endpoint");
  io.flag(l.transparent);
  io.u32_list(l.fds, "listener sockets");
}

// The image's head: what comes before the workers.
template <typename IO, typename T>
void process_fields(IO& io, T& image) {
  io.u64(image.instance);
  io.u32(image.fd_count);
}

}  // namespace

std::vector<uint8_t> encode_process_image(const ProcessImage& image, uint32_t version) {
  std::vector<uint8_t> out;
  Writer w(&out);
  w.u32(version);
  process_fields(w, image);
  w.count(image.listeners.size(), "listeners");
  for (const auto& l : image.listeners) listener_fields(w, l);
  w.u32_list(image.tunnel_fds, "tunnel sockets");
  w.count(image.workers.size(), "workers");
  for (const auto& worker : image.workers) {
    w.count(worker.sessions.size(), "sessions");
    for (const auto& s : worker.sessions) session_fields(w, s, version);
    put_connections(w, worker.connections, version);
  }
  return out;
}

bool decode_process_image(const uint8_t* data, size_t size, ProcessImage* out, std::string* error) {
  Reader r(data, size);
  ProcessImage image;
  uint32_t version = 0;
  r.u32(version);
  if (r.ok() && (version < kOldestImageVersion || version > kImageVersion))
    r.fail("image version " + std::to_string(version) + ", this rdmagw reads versions " +
           std::to_string(kOldestImageVersion) + " to " + std::to_string(kImageVersion));
  image.version = version;
  process_fields(r, image);
  if (r.ok() && image.fd_count > kMaxCount) r.fail("implausible count of sockets: " + std::to_string(image.fd_count));
  // Each socket belongs to one place: a socket named twice would be closed
  // by one owner under the other.
  std::vector<bool> used(r.ok() ? image.fd_count : 0);
  auto fd_ok = [&](uint32_t fd) {
    if (!r.ok()) return;
    if (fd >= image.fd_count)
      r.fail("socket index " + std::to_string(fd) + " beyond the sockets sent");
    else if (used[fd])
      r.fail("socket index " + std::to_string(fd) + " named twice");
    else
      used[fd] = true;
  };
  size_t n = r.count("listeners");
  for (size_t i = 0; i < n && r.ok(); ++i) {
    ListenerImage l;
    listener_fields(r, l);
    for (uint32_t fd : l.fds) fd_ok(fd);
    image.listeners.push_back(std::move(l));
  }
  r.u32_list(image.tunnel_fds, "tunnel sockets");
  for (uint32_t fd : image.tunnel_fds) fd_ok(fd);
  n = r.count("workers");
  for (size_t i = 0; i < n && r.ok(); ++i) {
    WorkerImage worker;
    size_t sessions = r.count("sessions");
    for (size_t j = 0; j < sessions && r.ok(); ++j) {
      worker.sessions.emplace_back();
      session_fields(r, worker.sessions.back(), version);
      check_session(r, worker.sessions.back(), version);
    }
    get_connections(r, &worker.connections, worker.sessions.size(), fd_ok, version);
    image.workers.push_back(std::move(worker));
  }
  if (r.ok() && !r.at_end()) r.fail("bytes after the image");
  if (!r.ok()) {
    *error = r.error();
    return false;
  }
  *out = std::move(image);
  return true;
}

}  // namespace rdmagw
