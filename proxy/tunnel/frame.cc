// SPDX-License-Identifier: Apache-2.0
#include "proxy/tunnel/frame.h"

#include "common/node_name.h"

namespace rdmagw::tunnel {

std::string_view frame_type_name(FrameType type) {
  switch (type) {
    case FrameType::kHello:
      return "HELLO";
    case FrameType::kOpen:
      return "OPEN";
    case FrameType::kData:
      return "DATA";
    case FrameType::kWindow:
      return "WINDOW";
    case FrameType::kFin:
      return "FIN";
    case FrameType::kReset:
      return "RESET";
    case FrameType::kPing:
      return "PING";
    case FrameType::kPong:
      return "PONG";
    case FrameType::kGoaway:
      return "GOAWAY";
    case FrameType::kSession:
      return "SESSION";
    case FrameType::kAck:
      return "ACK";
    case FrameType::kAuth:
      return "AUTH";
  }
  return "UNKNOWN";
}

std::string_view session_kind_name(SessionKind kind) {
  switch (kind) {
    case SessionKind::kNew:
      return "new";
    case SessionKind::kResume:
      return "resume";
    case SessionKind::kAccepted:
      return "accepted";
    case SessionKind::kResumed:
      return "resumed";
    case SessionKind::kUnknown:
      return "unknown";
  }
  return "invalid";
}

size_t encode_session(uint8_t* out, const SessionPayload& session) {
  encode_header(out, FrameType::kSession, 0, kSessionPayloadSize);
  uint8_t* p = out + kHeaderSize;
  put_u64(p, session.token.instance);
  put_u64(p + 8, session.token.nonce);
  put_u32(p + 16, static_cast<uint32_t>(session.kind));
  put_u64(p + 20, session.received);
  return kHeaderSize + kSessionPayloadSize;
}

bool decode_session(std::span<const uint8_t> payload, SessionPayload* out, std::string* reason) {
  if (payload.size() != kSessionPayloadSize) {
    *reason = "SESSION payload must be " + std::to_string(kSessionPayloadSize) + " bytes";
    return false;
  }
  const uint8_t* p = payload.data();
  out->token.instance = get_u64(p);
  out->token.nonce = get_u64(p + 8);
  uint32_t kind = get_u32(p + 16);
  if (kind > static_cast<uint32_t>(SessionKind::kUnknown)) {
    *reason = "SESSION kind " + std::to_string(kind) + " unknown";
    return false;
  }
  out->kind = static_cast<SessionKind>(kind);
  out->received = get_u64(p + 20);
  return true;
}

size_t auth_frame_size(const AuthPayload& auth) {
  if (auth.step == AuthStep::kCertificate || auth.step == AuthStep::kSignature)
    return kHeaderSize + 4 + auth.blob.size();
  return kHeaderSize + kAuthPayloadSize + (auth.has_dialed ? kAuthAddressSize : 0) +
         (auth.has_share ? kAuthShareSize : 0);
}

size_t encode_auth(uint8_t* out, const AuthPayload& auth) {
  size_t size = auth_frame_size(auth);
  encode_header(out, FrameType::kAuth, 0, static_cast<uint32_t>(size - kHeaderSize));
  uint8_t* p = out + kHeaderSize;
  put_u32(p, static_cast<uint32_t>(auth.step));
  p += 4;
  if (auth.step == AuthStep::kCertificate || auth.step == AuthStep::kSignature) {
    if (!auth.blob.empty()) std::memcpy(p, auth.blob.data(), auth.blob.size());
    return size;
  }
  std::memcpy(p, auth.value.data(), kAuthValueSize);
  p += kAuthValueSize;
  if (auth.has_dialed) {
    std::memcpy(p, auth.dialed.data(), kAuthAddressSize);
    p += kAuthAddressSize;
  }
  if (auth.has_share) std::memcpy(p, auth.share.data(), kAuthShareSize);
  return size;
}

bool decode_auth(std::span<const uint8_t> payload, AuthPayload* out, std::string* reason) {
  if (payload.size() < 4) {
    *reason = "AUTH payload shorter than its step";
    return false;
  }
  uint32_t step = get_u32(payload.data());
  std::span<const uint8_t> rest = payload.subspan(4);
  *out = AuthPayload{};
  switch (step) {
    case static_cast<uint32_t>(AuthStep::kChallenge): {
      // A nonce, then the dialed address and a key share, each optional:
      // their sizes (16, 32) tell which are there.
      size_t extra = rest.size() >= kAuthValueSize ? rest.size() - kAuthValueSize : 1;
      if (extra != 0 && extra != kAuthAddressSize && extra != kAuthShareSize &&
          extra != kAuthAddressSize + kAuthShareSize) {
        *reason = "AUTH challenge of " + std::to_string(payload.size()) + " bytes";
        return false;
      }
      out->step = AuthStep::kChallenge;
      std::memcpy(out->value.data(), rest.data(), kAuthValueSize);
      const uint8_t* p = rest.data() + kAuthValueSize;
      out->has_dialed = extra == kAuthAddressSize || extra == kAuthAddressSize + kAuthShareSize;
      if (out->has_dialed) {
        std::memcpy(out->dialed.data(), p, kAuthAddressSize);
        p += kAuthAddressSize;
      }
      out->has_share = extra >= kAuthShareSize;
      if (out->has_share) std::memcpy(out->share.data(), p, kAuthShareSize);
      return true;
    }
    case static_cast<uint32_t>(AuthStep::kProof):
      if (rest.size() != kAuthValueSize) {
        *reason =
            "AUTH proof of " + std::to_string(payload.size()) + " bytes; it has " + std::to_string(kAuthPayloadSize);
        return false;
      }
      out->step = AuthStep::kProof;
      std::memcpy(out->value.data(), rest.data(), kAuthValueSize);
      return true;
    case static_cast<uint32_t>(AuthStep::kCertificate):
    case static_cast<uint32_t>(AuthStep::kSignature): {
      size_t max = step == static_cast<uint32_t>(AuthStep::kCertificate) ? kMaxCertificateSize : kMaxSignatureSize;
      if (rest.empty() || rest.size() > max) {
        *reason = std::string("AUTH ") + (max == kMaxCertificateSize ? "certificate" : "signature") + " of " +
                  std::to_string(rest.size()) + " bytes (1.." + std::to_string(max) + ")";
        return false;
      }
      out->step = static_cast<AuthStep>(step);
      out->blob = rest;
      return true;
    }
    default:
      *reason = "AUTH step " + std::to_string(step) + " unknown";
      return false;
  }
}

std::string_view reset_code_name(ResetCode code) {
  switch (code) {
    case ResetCode::kCancel:
      return "cancel";
    case ResetCode::kRefused:
      return "refused";
    case ResetCode::kConnectFailed:
      return "connect-failed";
    case ResetCode::kNotAllowed:
      return "not-allowed";
    case ResetCode::kPeerGone:
      return "peer-gone";
    case ResetCode::kProtocol:
      return "protocol";
    case ResetCode::kResource:
      return "resource";
    case ResetCode::kShutdown:
      return "shutdown";
  }
  return "unknown";
}

size_t encode_hello(uint8_t* out, const HelloPayload& hello) {
  uint32_t len = static_cast<uint32_t>(kHelloFixedSize + hello.node.size());
  encode_header(out, FrameType::kHello, 0, len);
  uint8_t* p = out + kHeaderSize;
  put_u16(p, hello.version);
  put_u16(p + 2, 0);
  put_u32(p + 4, hello.capabilities);
  put_u32(p + 8, hello.max_data);
  put_u32(p + 12, hello.stream_window);
  put_u64(p + 16, hello.session_window);
  p[24] = static_cast<uint8_t>(hello.node.size());
  std::memcpy(p + 25, hello.node.data(), hello.node.size());
  return kHeaderSize + len;
}

size_t encode_u32_frame(uint8_t* out, FrameType type, uint32_t stream_id, uint32_t value) {
  encode_header(out, type, stream_id, 4);
  put_u32(out + kHeaderSize, value);
  return kHeaderSize + 4;
}

size_t encode_u64_frame(uint8_t* out, FrameType type, uint32_t stream_id, uint64_t value) {
  encode_header(out, type, stream_id, 8);
  put_u64(out + kHeaderSize, value);
  return kHeaderSize + 8;
}

size_t encode_empty_frame(uint8_t* out, FrameType type, uint32_t stream_id) {
  encode_header(out, type, stream_id, 0);
  return kHeaderSize;
}

namespace {

size_t address_length(uint8_t family) { return family == 4 ? 4 : family == 6 ? 16 : 0; }

size_t origin_address_length(const OriginAddress& a) { return a.family == 0 ? 1 : 1 + address_length(a.family) + 2; }

uint8_t* put_origin_address(uint8_t* out, const OriginAddress& a) {
  *out++ = a.family;
  if (a.family == 0) return out;
  size_t n = address_length(a.family);
  std::memcpy(out, a.address.data(), n);
  put_u16(out + n, a.port);
  return out + n + 2;
}

// False (and why) for a family other than 0, 4, 6 or an address cut short.
bool get_origin_address(std::span<const uint8_t>* in, OriginAddress* a, std::string_view which, std::string* reason) {
  if (in->empty()) {
    *reason = "OPEN origin without its " + std::string(which);
    return false;
  }
  a->family = (*in)[0];
  if (a->family != 0 && a->family != 4 && a->family != 6) {
    *reason = "OPEN origin " + std::string(which) + " of family " + std::to_string(a->family);
    return false;
  }
  size_t n = address_length(a->family);
  size_t need = a->family == 0 ? 1 : 1 + n + 2;
  if (in->size() < need) {
    *reason = "OPEN origin " + std::string(which) + " cut short";
    return false;
  }
  if (a->family != 0) {
    std::memcpy(a->address.data(), in->data() + 1, n);
    a->port = get_u16(in->data() + 1 + n);
  }
  *in = in->subspan(need);
  return true;
}

}  // namespace

size_t origin_length(const StreamOrigin& origin) {
  return origin.connection.size() + origin_address_length(origin.client) + origin_address_length(origin.destination);
}

void encode_origin(uint8_t* out, const StreamOrigin& origin) {
  std::memcpy(out, origin.connection.data(), origin.connection.size());
  put_origin_address(put_origin_address(out + origin.connection.size(), origin.client), origin.destination);
}

bool decode_origin(std::span<const uint8_t> in, StreamOrigin* out, std::string* reason) {
  *out = {};
  if (in.size() < out->connection.size()) {
    *reason = "OPEN origin without a connection id";
    return false;
  }
  std::memcpy(out->connection.data(), in.data(), out->connection.size());
  in = in.subspan(out->connection.size());
  if (!get_origin_address(&in, &out->client, "client", reason) ||
      !get_origin_address(&in, &out->destination, "destination", reason))
    return false;
  if (!in.empty()) {
    *reason = "OPEN origin with " + std::to_string(in.size()) + " bytes past its destination";
    return false;
  }
  return true;
}

size_t open_prefix_length(std::string_view target, const StreamOrigin* origin) {
  return kHeaderSize + 2 + target.size() + (origin ? 1 + origin_length(*origin) : 0);
}

uint8_t* encode_open_before(uint8_t* payload_start, uint32_t stream_id, std::string_view target, uint32_t first_bytes,
                            const StreamOrigin* origin) {
  size_t prefix = open_prefix_length(target, origin);
  uint8_t* frame = payload_start - prefix;
  encode_header(frame, FrameType::kOpen, stream_id, static_cast<uint32_t>(prefix - kHeaderSize + first_bytes));
  put_u16(frame + kHeaderSize, static_cast<uint16_t>(target.size()));
  std::memcpy(frame + kHeaderSize + 2, target.data(), target.size());
  if (origin) {
    uint8_t* p = frame + kHeaderSize + 2 + target.size();
    *p = static_cast<uint8_t>(origin_length(*origin));
    encode_origin(p + 1, *origin);
  }
  return frame;
}

bool validate_header(const uint8_t* raw, uint32_t max_data, FrameHeader* out, std::string* reason) {
  uint8_t type = raw[0];
  if (type < static_cast<uint8_t>(FrameType::kHello) || type > static_cast<uint8_t>(FrameType::kAuth)) {
    *reason = "unknown frame type " + std::to_string(type);
    return false;
  }
  if (get_u16(raw + 2) != 0) {
    *reason = "reserved header bits set";
    return false;
  }
  out->type = static_cast<FrameType>(type);
  out->flags = raw[1];
  out->stream_id = get_u32(raw + 4);
  out->length = get_u32(raw + 8);
  if (out->flags != 0) {
    *reason = "unknown flags " + std::to_string(out->flags) + " on " + std::string(frame_type_name(out->type));
    return false;
  }
  uint32_t limit = kMaxPayload;
  bool needs_stream = true;
  switch (out->type) {
    case FrameType::kHello:
      limit = kHelloFixedSize + kMaxNodeNameLength;
      needs_stream = false;
      break;
    case FrameType::kOpen:
      limit = static_cast<uint32_t>(kMaxOpenPrefix + max_data);
      break;
    case FrameType::kData:
      limit = max_data;
      break;
    case FrameType::kWindow:
      limit = 4;
      needs_stream = false;
      break;
    case FrameType::kFin:
      limit = 0;
      break;
    case FrameType::kReset:
      limit = 4;
      break;
    case FrameType::kPing:
    case FrameType::kPong:
      limit = 8;
      needs_stream = false;
      break;
    case FrameType::kGoaway:
      limit = 4;
      needs_stream = false;
      break;
    case FrameType::kSession:
      limit = kSessionPayloadSize;
      needs_stream = false;
      break;
    case FrameType::kAck:
      limit = 8;
      needs_stream = false;
      break;
    case FrameType::kAuth:
      limit = kMaxAuthPayloadSize;
      needs_stream = false;
      break;
  }
  if (out->length > limit) {
    *reason = std::string(frame_type_name(out->type)) + " payload of " + std::to_string(out->length) +
              " bytes exceeds limit " + std::to_string(limit);
    return false;
  }
  if (needs_stream && out->stream_id == 0) {
    *reason = std::string(frame_type_name(out->type)) + " on stream 0";
    return false;
  }
  bool session_only = out->type == FrameType::kHello || out->type == FrameType::kPing ||
                      out->type == FrameType::kPong || out->type == FrameType::kGoaway ||
                      out->type == FrameType::kSession || out->type == FrameType::kAck || out->type == FrameType::kAuth;
  if (session_only && out->stream_id != 0) {
    *reason = std::string(frame_type_name(out->type)) + " on stream " + std::to_string(out->stream_id) + " (must be 0)";
    return false;
  }
  return true;
}

bool decode_hello(std::span<const uint8_t> payload, HelloPayload* out, std::string* reason) {
  if (payload.size() < kHelloFixedSize) {
    *reason = "HELLO shorter than " + std::to_string(kHelloFixedSize) + " bytes";
    return false;
  }
  const uint8_t* p = payload.data();
  out->version = get_u16(p);
  out->capabilities = get_u32(p + 4);
  out->max_data = get_u32(p + 8);
  out->stream_window = get_u32(p + 12);
  out->session_window = get_u64(p + 16);
  size_t node_len = p[24];
  if (payload.size() != kHelloFixedSize + node_len) {
    *reason = "HELLO node name length " + std::to_string(node_len) + " does not match payload";
    return false;
  }
  out->node.assign(reinterpret_cast<const char*>(p + 25), node_len);
  if (out->version != kProtocolVersion) {
    *reason = "unsupported protocol version " + std::to_string(out->version);
    return false;
  }
  // The ranges the config parser enforces on buffer_size, stream_window and
  // session_budget (common/protocol_limits.h): a peer whose config passed
  // --check is never refused here.
  auto outside = [&](const char* field, uint64_t value, uint64_t min, uint64_t max) {
    if (value >= min && value <= max) return false;
    *reason = std::string("HELLO ") + field + " " + std::to_string(value) + " outside " + std::to_string(min) + ".." +
              std::to_string(max);
    return true;
  };
  if (outside("max_data", out->max_data, kMaxDataMin, kMaxDataMax)) return false;
  if (outside("stream_window", out->stream_window, kStreamWindowMin, kStreamWindowMax)) return false;
  if (outside("session_window", out->session_window, kSessionWindowMin, kSessionWindowMax)) return false;
  if (out->stream_window < out->max_data || out->session_window < out->stream_window) {
    *reason = "HELLO windows inconsistent (stream " + std::to_string(out->stream_window) + ", session " +
              std::to_string(out->session_window) + ")";
    return false;
  }
  // A name outside the rule would reach logs, labels and terminals as the
  // peer chose it (common/node_name.h).
  if (std::string why = node_name_problem(out->node); !why.empty()) {
    *reason = "HELLO node name is not a node name: " + why;
    return false;
  }
  return true;
}

bool decode_open(std::span<const uint8_t> payload, OpenPayload* out, std::string* reason, bool with_origin) {
  if (payload.size() < 2) {
    *reason = "OPEN without target length";
    return false;
  }
  size_t len = get_u16(payload.data());
  if (len == 0 || len > kMaxTargetLength || 2 + len > payload.size()) {
    *reason = "OPEN target length " + std::to_string(len) + " invalid";
    return false;
  }
  out->target = std::string_view(reinterpret_cast<const char*>(payload.data() + 2), len);
  std::span<const uint8_t> rest = payload.subspan(2 + len);
  out->has_origin = with_origin;
  out->origin = {};
  if (with_origin) {
    size_t origin_len = rest.empty() ? 0 : rest[0];
    if (rest.empty() || origin_len > rest.size() - 1) {
      *reason = "OPEN origin length " + std::to_string(origin_len) + " invalid";
      return false;
    }
    if (!decode_origin(rest.subspan(1, origin_len), &out->origin, reason)) return false;
    rest = rest.subspan(1 + origin_len);
  }
  out->first_bytes = rest;
  return true;
}

bool decode_u32(const FrameHeader& h, std::span<const uint8_t> payload, uint32_t* out, std::string* reason) {
  if (payload.size() != 4) {
    *reason = std::string(frame_type_name(h.type)) + " payload must be 4 bytes";
    return false;
  }
  *out = get_u32(payload.data());
  return true;
}

bool decode_u64(const FrameHeader& h, std::span<const uint8_t> payload, uint64_t* out, std::string* reason) {
  if (payload.size() != 8) {
    *reason = std::string(frame_type_name(h.type)) + " payload must be 8 bytes";
    return false;
  }
  *out = get_u64(payload.data());
  return true;
}

FrameReader::Status FrameReader::next(const uint8_t* data, size_t size, FrameHeader* header,
                                      std::span<const uint8_t>* payload, size_t* consumed, std::string* reason) const {
  if (size < kHeaderSize) return Status::kNeedMore;
  if (!validate_header(data, max_data_, header, reason)) return Status::kError;
  if (size < kHeaderSize + header->length) return Status::kNeedMore;
  *payload = std::span<const uint8_t>(data + kHeaderSize, header->length);
  *consumed = kHeaderSize + header->length;
  return Status::kFrame;
}

}  // namespace rdmagw::tunnel
