// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/takeover_image.h"

#include <cstring>

#include "common/protocol_limits.h"

namespace rdmagw {

namespace {

// Version 1 images come from an rdmagw whose tunnel.buffer_size default was
// 16 KiB (tunnel::kVersion1DefaultMaxData).
constexpr uint32_t kImageVersion = kTakeoverImageVersion;
constexpr uint32_t kOldestImageVersion = kOldestTakeoverImageVersion;
constexpr size_t kMaxString = 4096;
constexpr size_t kMaxBytes = size_t{1} << 30;  // one session's kept frames at most
constexpr size_t kMaxCount = size_t{1} << 24;

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>* out) : out_(out) {}
  void u8(uint8_t v) { out_->push_back(v); }
  void boolean(bool v) { u8(v ? 1 : 0); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_->push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_->push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void bytes(const void* p, size_t n) {
    u64(n);
    auto* b = static_cast<const uint8_t*>(p);
    out_->insert(out_->end(), b, b + n);
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  void blob(const std::vector<uint8_t>& v) { bytes(v.data(), v.size()); }

 private:
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
  uint8_t u8() {
    if (!need(1)) return 0;
    return *p_++;
  }
  bool boolean() {
    uint8_t v = u8();
    if (v > 1) fail("a flag is neither 0 nor 1");
    return v == 1;
  }
  uint32_t u32() {
    if (!need(4)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{p_[i]} << (8 * i);
    p_ += 4;
    return v;
  }
  uint64_t u64() {
    if (!need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{p_[i]} << (8 * i);
    p_ += 8;
    return v;
  }
  std::string str(const char* what) {
    uint64_t n = u64();
    if (n > kMaxString) {
      fail(std::string(what) + " is longer than " + std::to_string(kMaxString) + " bytes");
      return {};
    }
    if (!need(n)) return {};
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  std::vector<uint8_t> blob(const char* what) {
    uint64_t n = u64();
    if (n > kMaxBytes) {
      fail(std::string(what) + " is larger than 1 GiB");
      return {};
    }
    if (!need(n)) return {};
    std::vector<uint8_t> v(p_, p_ + n);
    p_ += n;
    return v;
  }
  size_t count(const char* what) {
    uint64_t n = u64();
    // Every element takes at least one byte: a count beyond what is left is a lie.
    if (n > kMaxCount || n > static_cast<uint64_t>(end_ - p_)) {
      fail(std::string("implausible count of ") + what + ": " + std::to_string(n));
      return 0;
    }
    return static_cast<size_t>(n);
  }
  bool at_end() const { return p_ == end_; }

 private:
  bool need(uint64_t n) {
    if (!ok()) return false;
    if (n > static_cast<uint64_t>(end_ - p_)) return fail("the image ends early");
    return true;
  }
  const uint8_t* p_;
  const uint8_t* end_;
  std::string error_;
};

void put_stream_tunnel(Writer& w, const tunnel::StreamTunnelImage& t) {
  w.u32(t.id);
  w.u64(t.send_available);
  w.u64(t.receive_size);
  w.u64(t.receive_remaining);
  w.u64(t.receive_pending);
  w.boolean(t.fin_sent);
  w.boolean(t.fin_received);
  w.boolean(t.wants_credit);
}

void get_stream_tunnel(Reader& r, tunnel::StreamTunnelImage* t) {
  t->id = r.u32();
  t->send_available = r.u64();
  t->receive_size = r.u64();
  t->receive_remaining = r.u64();
  t->receive_pending = r.u64();
  t->fin_sent = r.boolean();
  t->fin_received = r.boolean();
  t->wants_credit = r.boolean();
  if (t->receive_remaining > t->receive_size || t->receive_pending > t->receive_size - t->receive_remaining)
    r.fail("stream " + std::to_string(t->id) + ": its receive window does not add up");
}

void put_session(Writer& w, const tunnel::SessionImage& s, uint32_t image_version) {
  w.boolean(s.dialer);
  w.str(s.peer_label);
  w.str(s.peer_node);
  w.u32(s.peer_hello.version);
  w.u32(s.peer_hello.capabilities);
  w.u32(s.peer_hello.max_data);
  w.u32(s.peer_hello.stream_window);
  w.u64(s.peer_hello.session_window);
  w.str(s.peer_hello.node);
  if (image_version >= 2) {
    w.u32(s.own_max_data);
    w.u32(s.own_stream_window);
    w.u64(s.own_session_window);
  }
  w.u64(s.token.instance);
  w.u64(s.token.nonce);
  w.u64(s.received);
  w.u64(s.ack_sent);
  w.u64(s.peer_acked);
  w.u64(s.frames_base);
  w.blob(s.frames);
  w.u32(s.next_local_id);
  w.u32(s.highest_remote_id);
  w.u64(s.session_send_available);
  w.u64(s.session_send_reserve);
  w.u64(s.session_receive_size);
  w.u64(s.session_receive_remaining);
  w.u64(s.session_receive_pending);
  w.boolean(s.goaway_sent);
  w.boolean(s.goaway_received);
  w.u8(s.transport_kind);
  for (uint64_t v :
       {s.age_ms, s.frames_in, s.frames_out, s.bytes_in, s.bytes_out, s.streams_opened, s.resumes, s.resent_bytes})
    w.u64(v);
  w.u64(s.blocked.size());
  for (uint32_t id : s.blocked) w.u32(id);
}

void get_session(Reader& r, tunnel::SessionImage* s, uint32_t image_version) {
  s->dialer = r.boolean();
  s->peer_label = r.str("peer name");
  s->peer_node = r.str("peer node");
  uint32_t version = r.u32();
  if (version > 0xffff) r.fail("protocol version out of range");
  s->peer_hello.version = static_cast<uint16_t>(version);
  s->peer_hello.capabilities = r.u32();
  s->peer_hello.max_data = r.u32();
  s->peer_hello.stream_window = r.u32();
  s->peer_hello.session_window = r.u64();
  s->peer_hello.node = r.str("peer HELLO node");
  if (image_version >= 2) {
    s->own_max_data = r.u32();
    s->own_stream_window = r.u32();
    s->own_session_window = r.u64();
    // As a HELLO would be checked: the new process announces them again.
    if (r.ok() && (s->own_max_data < kMaxDataMin || s->own_max_data > kMaxDataMax ||
                   s->own_stream_window < s->own_max_data || s->own_stream_window > kStreamWindowMax ||
                   s->own_session_window < s->own_stream_window || s->own_session_window > kSessionWindowMax))
      r.fail("session settings out of the protocol's limits");
  }
  s->token.instance = r.u64();
  s->token.nonce = r.u64();
  s->received = r.u64();
  s->ack_sent = r.u64();
  s->peer_acked = r.u64();
  s->frames_base = r.u64();
  s->frames = r.blob("kept frames");
  s->next_local_id = r.u32();
  s->highest_remote_id = r.u32();
  s->session_send_available = r.u64();
  s->session_send_reserve = r.u64();
  s->session_receive_size = r.u64();
  s->session_receive_remaining = r.u64();
  s->session_receive_pending = r.u64();
  s->goaway_sent = r.boolean();
  s->goaway_received = r.boolean();
  s->transport_kind = r.u8();
  for (uint64_t* v : {&s->age_ms, &s->frames_in, &s->frames_out, &s->bytes_in, &s->bytes_out, &s->streams_opened,
                      &s->resumes, &s->resent_bytes})
    *v = r.u64();
  size_t blocked = r.count("blocked streams");
  for (size_t i = 0; i < blocked && r.ok(); ++i) s->blocked.push_back(r.u32());
  if (!r.ok()) return;
  if (s->transport_kind > 1) r.fail("unknown transport kind " + std::to_string(s->transport_kind));
  if (s->peer_acked < s->frames_base || s->peer_acked - s->frames_base > s->frames.size())
    r.fail("the peer's acknowledged offset lies outside the kept frames");
  if (s->ack_sent > s->received) r.fail("more acknowledged than received");
  if (s->session_receive_remaining > s->session_receive_size ||
      s->session_receive_pending > s->session_receive_size - s->session_receive_remaining)
    r.fail("the session's receive window does not add up");
  if (s->session_send_reserve > s->peer_hello.session_window) r.fail("session credit reserve beyond the peer's window");
}

void put_connections(Writer& w, const local::HandoverImages& c) {
  w.u64(c.streams.size());
  for (const auto& s : c.streams) {
    w.u32(s.fd);
    w.u32(static_cast<uint32_t>(s.session));
    for (bool b : {s.target_side, s.opened, s.connecting, s.read_closed, s.remote_fin, s.write_shut}) w.boolean(b);
    w.str(s.listener);
    w.str(s.peer);
    w.str(s.target);
    w.u64(s.bytes_up);
    w.u64(s.bytes_down);
    w.u64(s.age_ms);
    w.blob(s.to_socket);
    w.blob(s.parked);
    put_stream_tunnel(w, s.tunnel);
  }
  w.u64(c.pipes.size());
  for (const auto& p : c.pipes) {
    w.u32(p.client_fd);
    w.u32(p.server_fd);
    w.boolean(p.connecting);
    w.str(p.listener);
    w.str(p.destination);
    w.blob(p.up);
    w.blob(p.down);
    w.boolean(p.up_ended);
    w.boolean(p.down_ended);
  }
}

template <typename FdCheck>
void get_connections(Reader& r, local::HandoverImages* c, size_t sessions, FdCheck& fd_ok) {
  size_t n = r.count("streams");
  for (size_t i = 0; i < n && r.ok(); ++i) {
    local::LocalStreamImage s;
    s.fd = r.u32();
    fd_ok(s.fd);
    uint32_t session = r.u32();
    s.session = static_cast<int32_t>(session);
    if (session != 0xffffffffu && session >= sessions) r.fail("a stream names session " + std::to_string(session));
    for (bool* b : {&s.target_side, &s.opened, &s.connecting, &s.read_closed, &s.remote_fin, &s.write_shut})
      *b = r.boolean();
    s.listener = r.str("listener name");
    s.peer = r.str("peer name");
    s.target = r.str("target");
    s.bytes_up = r.u64();
    s.bytes_down = r.u64();
    s.age_ms = r.u64();
    s.to_socket = r.blob("bytes for the socket");
    s.parked = r.blob("parked bytes");
    get_stream_tunnel(r, &s.tunnel);
    if (s.session >= 0 && !s.opened) r.fail("a stream on a session that was never opened");
    c->streams.push_back(std::move(s));
  }
  n = r.count("passthrough connections");
  for (size_t i = 0; i < n && r.ok(); ++i) {
    local::PipeImage p;
    p.client_fd = r.u32();
    p.server_fd = r.u32();
    fd_ok(p.client_fd);
    fd_ok(p.server_fd);
    p.connecting = r.boolean();
    p.listener = r.str("listener name");
    p.destination = r.str("destination");
    p.up = r.blob("pending bytes");
    p.down = r.blob("pending bytes");
    p.up_ended = r.boolean();
    p.down_ended = r.boolean();
    c->pipes.push_back(std::move(p));
  }
}

}  // namespace

std::vector<uint8_t> encode_process_image(const ProcessImage& image, uint32_t version) {
  std::vector<uint8_t> out;
  Writer w(&out);
  w.u32(version);
  w.u64(image.instance);
  w.u32(image.fd_count);
  w.u64(image.listeners.size());
  for (const auto& l : image.listeners) {
    w.str(l.endpoint);
    w.boolean(l.transparent);
    w.u64(l.fds.size());
    for (uint32_t fd : l.fds) w.u32(fd);
  }
  w.u64(image.tunnel_fds.size());
  for (uint32_t fd : image.tunnel_fds) w.u32(fd);
  w.u64(image.workers.size());
  for (const auto& worker : image.workers) {
    w.u64(worker.sessions.size());
    for (const auto& s : worker.sessions) put_session(w, s, version);
    put_connections(w, worker.connections);
  }
  return out;
}

bool decode_process_image(const uint8_t* data, size_t size, ProcessImage* out, std::string* error) {
  Reader r(data, size);
  ProcessImage image;
  uint32_t version = r.u32();
  if (r.ok() && (version < kOldestImageVersion || version > kImageVersion))
    r.fail("image version " + std::to_string(version) + ", this rdmagw reads versions " +
           std::to_string(kOldestImageVersion) + " to " + std::to_string(kImageVersion));
  image.version = version;
  image.instance = r.u64();
  image.fd_count = r.u32();
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
    l.endpoint = r.str("listener endpoint");
    l.transparent = r.boolean();
    size_t fds = r.count("listener sockets");
    for (size_t j = 0; j < fds && r.ok(); ++j) {
      l.fds.push_back(r.u32());
      fd_ok(l.fds.back());
    }
    image.listeners.push_back(std::move(l));
  }
  n = r.count("tunnel sockets");
  for (size_t i = 0; i < n && r.ok(); ++i) {
    image.tunnel_fds.push_back(r.u32());
    fd_ok(image.tunnel_fds.back());
  }
  n = r.count("workers");
  for (size_t i = 0; i < n && r.ok(); ++i) {
    WorkerImage worker;
    size_t sessions = r.count("sessions");
    for (size_t j = 0; j < sessions && r.ok(); ++j) {
      worker.sessions.emplace_back();
      get_session(r, &worker.sessions.back(), version);
    }
    get_connections(r, &worker.connections, worker.sessions.size(), fd_ok);
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
