// SPDX-License-Identifier: Apache-2.0
#pragma once
// Tunnel frames: the same bytes travel over the TCP and RDMA transports.
// Layout and rules: docs/protocol.md. Every field of a received frame is
// validated here before the session acts on it: frames are untrusted input.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "common/protocol_limits.h"

namespace rdmagw::tunnel {

inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kHeaderSize = 12;
// The limits shared with the config parser (common/protocol_limits.h), also
// reachable as tunnel::k...: kMaxPayload is the largest payload of any frame
// (DATA payloads are further limited by the receiver's max_data, its buffer
// size); kBufferHeadroom is the room a buffer keeps in front of its payload
// for an OPEN or DATA header written in place.
using rdmagw::kBufferHeadroom;
using rdmagw::kMaxNodeNameLength;
using rdmagw::kMaxOpenPrefix;
using rdmagw::kMaxOriginLength;
using rdmagw::kMaxPayload;
using rdmagw::kMaxTargetLength;
static_assert(kHeaderSize + kMaxOpenPrefix <= kBufferHeadroom,
              "an OPEN header (frame header, target length, target, origin) fits in the headroom");

enum class FrameType : uint8_t {
  kHello = 1,
  kOpen = 2,
  kData = 3,
  kWindow = 4,
  kFin = 5,
  kReset = 6,
  kPing = 7,
  kPong = 8,
  kGoaway = 9,
  // Resumable sessions only (both HELLOs carry kCapResume):
  kSession = 10,  // the session's identity, and where a resume starts
  kAck = 11,      // how much of the sender's session frames arrived
  // Authenticated tunnels only (tunnel.auth.mode psk: both HELLOs carry kCapAuth):
  kAuth = 12,  // a challenge (a nonce) or a proof (an HMAC), docs/protocol.md "Authentication"
};

// HELLO capability bits.
inline constexpr uint32_t kCapResume = 1;  // sessions survive their transport (SESSION, ACK)
// An RDMA connect that names a session (in its private data) reaches the
// worker holding that session: a session may resume on RDMA whichever
// transport it began on.
inline constexpr uint32_t kCapRdmaPlacement = 2;
// The sender authenticates with a pre-shared key: AUTH frames follow HELLO.
inline constexpr uint32_t kCapAuth = 4;
// The sender encrypts after the handshake (tunnel.auth.encrypt); both sides
// must, or the handshake fails. Covered by the AUTH proofs, so it cannot be
// stripped on the way.
inline constexpr uint32_t kCapEncrypt = 8;
// The sender's proofs name the address the dialer dialed, checked by the
// acceptor against its own (a host in between that relays both ways gets
// nothing), and every frame after the handshake is authenticated (AES-GCM,
// encrypted only with kCapEncrypt). An authenticating rdmagw requires it of
// its peer (docs/security.md).
inline constexpr uint32_t kCapBound = 16;
// The sender authenticates with its own certificate (tunnel.auth.mode cert)
// instead of a pre-shared key; both sides must (docs/security.md).
inline constexpr uint32_t kCapCert = 32;
// OPEN carries the stream's origin after its target: the connection's id,
// the application's address and, from a transparent listener, where it
// meant to go (StreamOrigin; both HELLOs carry it).
inline constexpr uint32_t kCapOrigin = 64;

// GOAWAY codes.
enum class GoawayCode : uint32_t {
  kDrain = 0,    // open no more streams here; those open go on
  kClosing = 1,  // the sender ends this session on purpose: do not resume it
};
std::string_view frame_type_name(FrameType type);

// Why a stream was reset; carried in RESET frames and printed in logs.
enum class ResetCode : uint32_t {
  kCancel = 0,         // the local application reset its socket
  kRefused = 1,        // target refused the connection
  kConnectFailed = 2,  // target unreachable / timed out
  kNotAllowed = 3,     // target not on the receiver's allowlist
  kPeerGone = 4,       // the session carrying the stream died
  kProtocol = 5,       // stream-level protocol violation
  kResource = 6,       // receiver out of buffers
  kShutdown = 7,       // sidecar shutting down past its drain timeout
};
std::string_view reset_code_name(ResetCode code);

struct FrameHeader {
  FrameType type;
  uint8_t flags;
  uint32_t stream_id;
  uint32_t length;  // payload bytes following the header
};

// --- little-endian helpers -------------------------------------------------
inline void put_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
inline void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint16_t get_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline void encode_header(uint8_t* out, FrameType type, uint32_t stream_id, uint32_t length, uint8_t flags = 0) {
  out[0] = static_cast<uint8_t>(type);
  out[1] = flags;
  put_u16(out + 2, 0);
  put_u32(out + 4, stream_id);
  put_u32(out + 8, length);
}

// --- payloads ----------------------------------------------------------------
// Which session a transport carries: the dialer's process instance and a
// nonce it drew for the session. Unique per dialing process.
struct SessionToken {
  uint64_t instance = 0;
  uint64_t nonce = 0;
  bool operator==(const SessionToken&) const = default;
};
struct SessionTokenHash {
  size_t operator()(const SessionToken& t) const { return std::hash<uint64_t>()(t.instance * 31 + t.nonce); }
};

// SESSION's `kind`: the dialer asks, the acceptor answers.
enum class SessionKind : uint32_t {
  kNew = 0,       // dialer: a new session
  kResume = 1,    // dialer: resume this session; `received` is where its peer's resend starts
  kAccepted = 2,  // acceptor: the new session is registered
  kResumed = 3,   // acceptor: resumed; `received` is where the dialer's resend starts
  kUnknown = 4,   // acceptor: no such session here (it ended, or this process restarted)
};
std::string_view session_kind_name(SessionKind kind);

struct SessionPayload {
  SessionToken token;
  SessionKind kind = SessionKind::kNew;
  uint64_t received = 0;  // session frame bytes the sender has taken in from its peer
};
inline constexpr size_t kSessionPayloadSize = 8 + 8 + 4 + 8;
size_t encode_session(uint8_t* out, const SessionPayload& session);
bool decode_session(std::span<const uint8_t> payload, SessionPayload* out, std::string* reason);

// AUTH: the dialer's challenge, the acceptor's challenge, then each side's
// proof (docs/protocol.md, "Authentication"). A challenge carries a nonce
// (kAuthValueSize bytes); the dialer's also the address it dialed
// (kCapBound, 16 bytes), and with certificates (kCapCert) each also an
// X25519 public key (32 bytes). A proof is, with a pre-shared key, one
// HMAC-SHA256 (kProof); with certificates, the prover's certificate (DER,
// kCertificate) and its signature over the handshake (kSignature).
enum class AuthStep : uint8_t { kChallenge = 1, kProof = 2, kCertificate = 3, kSignature = 4 };
inline constexpr size_t kAuthValueSize = 32;
inline constexpr size_t kAuthAddressSize = 16;
inline constexpr size_t kAuthShareSize = 32;
// Bounds that keep a handshake within what a transport holds before its
// peer is admitted (TcpTransport's kHandshakeReceiveSize).
inline constexpr size_t kMaxCertificateSize = 2048;
inline constexpr size_t kMaxSignatureSize = 512;
struct AuthPayload {
  AuthStep step = AuthStep::kChallenge;
  std::array<uint8_t, kAuthValueSize> value{};  // challenge: nonce; kProof: HMAC
  bool has_dialed = false;                      // the dialer's challenge
  std::array<uint8_t, kAuthAddressSize> dialed{};
  bool has_share = false;  // a challenge with certificates
  std::array<uint8_t, kAuthShareSize> share{};
  std::span<const uint8_t> blob;  // kCertificate, kSignature: the bytes (in the frame decoded from)
};
inline constexpr size_t kAuthPayloadSize = 4 + kAuthValueSize;
inline constexpr size_t kAuthDialerChallengeSize = kAuthPayloadSize + kAuthAddressSize;
inline constexpr size_t kMaxAuthPayloadSize = 4 + kMaxCertificateSize;
// The frame `auth` makes (header included).
size_t auth_frame_size(const AuthPayload& auth);
// Writes a whole AUTH frame; returns its size (auth_frame_size()).
size_t encode_auth(uint8_t* out, const AuthPayload& auth);
bool decode_auth(std::span<const uint8_t> payload, AuthPayload* out, std::string* reason);

struct HelloPayload {
  uint16_t version = kProtocolVersion;
  uint32_t capabilities = 0;
  uint32_t max_data = 0;        // largest DATA payload the sender accepts
  uint32_t stream_window = 0;   // initial receive window of each stream the sender receives
  uint64_t session_window = 0;  // receive budget of the whole session
  std::string node;
};
inline constexpr size_t kHelloFixedSize = 2 + 2 + 4 + 4 + 4 + 8 + 1;
// The largest frame a peer sends before it is admitted (HELLO with the
// longest node name; AUTH and SESSION are shorter): what a transport must be
// able to hold while it keeps its buffers small (Transport::admit()).
inline constexpr size_t kMaxHandshakeFrameSize = kHeaderSize + kHelloFixedSize + kMaxNodeNameLength;

// Writes a whole HELLO frame (header + payload); returns its size.
// `out` must hold kHeaderSize + kHelloFixedSize + node.size().
size_t encode_hello(uint8_t* out, const HelloPayload& hello);
size_t encode_u32_frame(uint8_t* out, FrameType type, uint32_t stream_id, uint32_t value);
size_t encode_u64_frame(uint8_t* out, FrameType type, uint32_t stream_id, uint64_t value);
size_t encode_empty_frame(uint8_t* out, FrameType type, uint32_t stream_id);
// Where a stream comes from (OPEN with kCapOrigin): told by the peer, so
// shown (logs, GET /streams, a PROXY header) but never trusted for a
// decision. An address of family 0 is unknown (a Unix-socket client; no
// original destination).
struct OriginAddress {
  uint8_t family = 0;                 // 0, 4 or 6
  std::array<uint8_t, 16> address{};  // network order; IPv4 in the first 4 bytes
  uint16_t port = 0;
  bool operator==(const OriginAddress&) const = default;
};
struct StreamOrigin {
  std::array<uint8_t, 16> connection{};  // ConnectionId's bytes
  OriginAddress client;
  OriginAddress destination;
  bool operator==(const StreamOrigin&) const = default;
};
// Its length on the wire (after origin_len), its bytes there (`out` holds
// origin_length()), and back, checked: every byte used, families 0, 4, 6.
size_t origin_length(const StreamOrigin& origin);
void encode_origin(uint8_t* out, const StreamOrigin& origin);
bool decode_origin(std::span<const uint8_t> in, StreamOrigin* out, std::string* reason);

// OPEN header + target (+ origin, if not null), written so that it ends
// exactly at `payload_start` (the first bytes of the app, if any, follow
// there). Returns the frame's first byte. Needs open_prefix_length() bytes
// of room before it.
size_t open_prefix_length(std::string_view target, const StreamOrigin* origin);
uint8_t* encode_open_before(uint8_t* payload_start, uint32_t stream_id, std::string_view target, uint32_t first_bytes,
                            const StreamOrigin* origin = nullptr);

// Validates a header read off the wire. `max_data` bounds DATA payloads.
bool validate_header(const uint8_t* raw, uint32_t max_data, FrameHeader* out, std::string* reason);
bool decode_hello(std::span<const uint8_t> payload, HelloPayload* out, std::string* reason);
struct OpenPayload {
  std::string_view target;
  bool has_origin = false;
  StreamOrigin origin;
  std::span<const uint8_t> first_bytes;
};
// `with_origin`: both HELLOs carried kCapOrigin, so the origin must be there.
bool decode_open(std::span<const uint8_t> payload, OpenPayload* out, std::string* reason, bool with_origin = false);
bool decode_u32(const FrameHeader& h, std::span<const uint8_t> payload, uint32_t* out, std::string* reason);
bool decode_u64(const FrameHeader& h, std::span<const uint8_t> payload, uint64_t* out, std::string* reason);

// Incremental decoder for a byte stream (the TCP transport): feed bytes,
// get whole frames. It never copies payloads; they point into the caller's
// buffer and are valid until the caller reuses it.
class FrameReader {
 public:
  explicit FrameReader(uint32_t max_data) : max_data_(max_data) {}

  enum class Status { kFrame, kNeedMore, kError };
  // Looks at data[0..size): on kFrame sets *header and *payload and
  // *consumed to the frame's full length. On kNeedMore with at least
  // kHeaderSize bytes, *header is set too (valid; its payload is short).
  Status next(const uint8_t* data, size_t size, FrameHeader* header, std::span<const uint8_t>* payload,
              size_t* consumed, std::string* reason) const;
  uint32_t max_data() const { return max_data_; }

 private:
  uint32_t max_data_;
};

}  // namespace rdmagw::tunnel
