// SPDX-License-Identifier: Apache-2.0
#pragma once
// The validated, immutable configuration snapshot. Parsing (config_parser.cc)
// turns YAML into this; the proxy only ever sees a fully validated Config.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/address.h"
#include "common/node_credentials.h"
#include "common/route_match.h"
#include "common/secret_keys.h"

namespace rdmagw {

enum class TransportMode { kAuto, kRdma, kTcp };
// The YAML spelling of a mode ("auto", "rdma", "tcp"), for messages, logs and
// the admin API.
std::string_view transport_mode_name(TransportMode mode);

struct PeerConfig {
  std::string name;
  std::string address;  // numeric IP the peer's tunnel listens on
  uint16_t tcp_port = 0;
  uint16_t rdma_port = 0;
  Endpoint tcp_endpoint;  // address + tcp_port, resolved
  // connect: always -- a session is dialled at start and kept; on_demand (the
  // default) -- dialled by the first stream, closed after
  // tunnel.session_idle_ms without streams.
  bool always_connected = false;
  // Found by a route's `peer: destination` (not written in peers:).
  bool discovered = false;
};

// tunnel.peer_cidrs[]: where `peer: destination` may find a peer's sidecar,
// and at which tunnel ports.
struct PeerCidr {
  RouteMatch cidr;  // any port
  uint16_t tcp_port = 0;
  uint16_t rdma_port = 0;
};

// Whether an endpoint is on an address of this host (LocalAddresses).
using LocalAddressTest = std::function<bool(const Endpoint&)>;

// The entry of `targets` that `TargetRule::this_node` stands for.
inline constexpr std::string_view kThisNodeTarget = "services:this-node";

// What the entries of `targets` that name no fixed endpoint ask about one;
// a test left empty covers nothing.
struct TargetFacts {
  LocalAddressTest is_local;  // tcp:self:PORT: the address is this host's
  // services:this-node: the services table lists it as an endpoint without
  // a sidecar, on a node whose node-mode rdmagw is this one.
  std::function<bool(const Endpoint&)> on_this_node;
};

// An entry of `targets`: an endpoint peers may open, and which peers may
// (docs/security.md, "Authorization by peer").
struct TargetRule {
  Endpoint target;
  // `tcp:self:PORT`: PORT on any address of this host (or pod), whose address
  // is not known when the file is written (docs/configuration.md, targets).
  // `target` then holds 0.0.0.0:PORT, its address unused.
  bool self = false;
  // `services:this-node`: any endpoint the services table lists on this
  // node (a node-mode rdmagw's pods, docs/kubernetes.md); `target` unused.
  bool this_node = false;
  // Peers by the address of their end of the session (the tunnel address
  // they dialed from), and (mode cert) by the node name their certificate
  // proves: both empty, any authenticated peer.
  std::vector<RouteMatch> peer_cidrs;
  std::vector<std::string> peer_names;
  // proxy_protocol: v2: each connection to the target begins with a PROXY
  // protocol v2 header naming the application's address (docs/deploy.md).
  bool proxy_protocol = false;
  std::string endpoint_text() const;  // as written: tcp:self:PORT, services:this-node, or the endpoint
  // endpoint_text(), then " peers: a, b" if restricted, " proxy_protocol: v2" if set
  std::string to_string() const;
  // Whether this entry is about `t` (`facts` decide the entries that name
  // no fixed endpoint).
  bool covers(const Endpoint& t, const TargetFacts& facts) const;
  bool operator==(const TargetRule& other) const { return to_string() == other.to_string(); }
};

// Why target_refusal() says no.
enum class TargetRefusal { kNone, kNotListed, kNotForThisPeer };

// A route of a transparent listener: what to do with connections whose
// original destination matches.
struct RouteConfig {
  // kService: the destination is a Kubernetes Service's ClusterIP:port, or
  // an endpoint's address:port, in the services file (services.file); a
  // ready endpoint is picked and reached through its rdmagw, or directly.
  // A destination the file does not know goes on to the next route.
  enum class Action { kTunnel, kPassthrough, kReject, kService };
  RouteMatch match;
  Action action = Action::kTunnel;
  std::string peer;  // kTunnel: the peer to carry it to (empty with by_destination)
  // peer: destination -- the sidecar on the host of the original destination
  // (inside tunnel.peer_cidrs).
  bool by_destination = false;
  bool has_target = false;
  Endpoint target;  // kTunnel: rewritten target; default: the original destination
};

struct ListenerConfig {
  std::string name;
  Endpoint listen;
  std::string peer;  // name of an entry in Config::peers (not for transparent listeners)
  Endpoint target;   // what the peer's rdmagw connects to (not for transparent listeners)
  // listen: transparent:IP:PORT -- connections arrive through an iptables
  // REDIRECT; their original destination picks a route (first match wins).
  bool transparent = false;
  std::vector<RouteConfig> routes;
  // unix: listeners only: the socket file's permission bits, set after bind
  // and again on every reload (connecting needs write permission, so the
  // process umask alone would keep other uids out: node mode shares the
  // socket with every pod on the host). 0: left as the umask made it.
  uint32_t socket_mode = 0;
  // TCP listeners: the addresses applications may connect from (any port);
  // a connection from elsewhere is reset at accept. Required on an address
  // other than loopback, which other hosts may reach: without it, anyone
  // who can connect would use the tunnel as this host's applications do.
  // Empty: anyone who can connect (loopback listeners, unix: ones).
  std::vector<RouteMatch> clients;
  // Limits (0: none), across the process's workers: connections open at
  // once (further ones are reset at accept), connections accepted per
  // second (a burst of as many; further ones are reset at accept), and how
  // long a connection may pass no byte in either direction before it is
  // reset both ways.
  uint32_t max_connections = 0;
  uint32_t accepts_per_second = 0;
  uint32_t idle_timeout_ms = 0;
  // Whether an application at `peer` may use it.
  bool admits(const sockaddr* peer) const {
    return clients.empty() ||
           std::any_of(clients.begin(), clients.end(), [&](const RouteMatch& m) { return m.matches(peer); });
  }
};

// The RDMA transport's knobs (tunnel.rdma). Defaults suit eRDMA.
struct RdmaConfig {
  std::string device;                         // device name (e.g. erdma_0); empty: the one routing to the peer
  uint64_t slab_size = 128ull * 1024 * 1024;  // registered (pinned) buffer memory per worker
  uint32_t recv_depth = 64;                   // receives posted per session: the peer's send credits
  uint32_t send_depth = 256;                  // send work requests in flight per session
  uint32_t busy_poll_us = 0;                  // spin on the CQ this long before sleeping
  uint32_t inline_threshold = 96;             // sends up to this size go inline (eRDMA: at most 96)
  // Slab memory the posted receives of a worker's RDMA sessions may hold
  // (each holds recv_depth buffers); past it new sessions go to TCP (auto)
  // or are refused. 0: half of slab_size (which holds 4 sessions at least).
  uint64_t max_pinned = 0;
  // The budget in force, and how many sessions fit in it, with buffers of
  // `stride` bytes (buffer_size + headroom).
  uint64_t pinned_budget(uint64_t stride) const {
    return max_pinned ? max_pinned : std::max<uint64_t>(slab_size / 2, stride * recv_depth);  // never below one
  }
  uint64_t session_limit(uint64_t stride) const { return pinned_budget(stride) / (stride * recv_depth); }
};

// tunnel.limits: what hostile or broken peers may cost (docs/security.md).
struct TunnelLimits {
  uint32_t handshakes = 256;             // connections in their handshake at once, process-wide
  uint32_t handshakes_per_address = 32;  // ... of them from one address
  uint32_t streams_per_session = 16384;  // streams a peer may have open in one session (0: no limit)
  uint32_t opens_per_second = 20000;     // OPENs a peer may send per second per session (0: no limit)
  uint32_t sessions_per_address = 32;    // sessions peers at one address may hold with one worker
};

// tunnel.auth: who may use the tunnel (docs/security.md).
// psk: one key for the fleet; cert: a certificate per node (X.509, signed by
// the fleet's CA), its name and addresses in it.
enum class AuthMode { kNone, kPsk, kCert };
std::string_view auth_mode_name(AuthMode mode);
struct AuthConfig {
  bool configured = false;  // tunnel.auth is written (a non-loopback tunnel requires it)
  AuthMode mode = AuthMode::kNone;
  std::vector<std::string> key_files;  // psk: the first proves, every one verifies
  // psk: the keys, read from key_files by load_config_file() (and again on
  // every reload); parse_config_text() alone leaves this null.
  std::shared_ptr<const SecretKeys> keys;
  // cert: the CAs peers' certificates must chain to (two during a CA's
  // rotation), this node's certificate and its private key.
  std::vector<std::string> ca_files;
  std::string cert_file, key_file;
  // cert: all three read and checked by load_config_file() (and again on
  // every reload); parse_config_text() alone leaves this null.
  std::shared_ptr<const NodeCredentials> credentials;
  // Every frame after the handshake is authenticated (AES-256-GCM records);
  // with encrypt also encrypted. Both ends must agree.
  bool encrypt = false;
  bool authenticates() const { return mode != AuthMode::kNone; }
};

struct TunnelConfig {
  std::string address = "127.0.0.1";
  uint16_t tcp_port = 7471;
  uint16_t rdma_port = 7472;
  TransportMode transport = TransportMode::kAuto;
  // Beyond address, ports and transport (all optional):
  // Announced in HELLO; their ranges are the protocol's (common/protocol_limits.h).
  uint32_t buffer_size = 32 * 1024;  // tunnel.buffer_size: max DATA payload per frame (docs/rdma.md, "Defaults")
  bool tcp_splice = false;  // tunnel.tcp_splice: large DATA payloads on TCP pass by splice (docs/architecture.md)
  bool buffer_size_given = false;                 // set in the file (a takeover from an older default needs to know)
  uint32_t stream_window = 256 * 1024;            // tunnel.stream_window: initial per-stream window
  uint64_t session_budget = 32ull * 1024 * 1024;  // tunnel.session_budget: bytes buffered per session
  uint32_t keepalive_interval_ms = 5000;          // tunnel.keepalive_interval_ms
  uint32_t keepalive_timeout_ms = 15000;          // tunnel.keepalive_timeout_ms
  uint32_t connect_timeout_ms = 3000;             // tunnel.connect_timeout_ms
  uint32_t reconnect_min_ms = 50;                 // tunnel.reconnect_min_ms: the first backoff after a failed dial
  uint32_t reconnect_max_ms = 2000;               // tunnel.reconnect_max_ms: backoff ceiling
  uint32_t resume_timeout_ms = 10000;             // tunnel.resume_timeout_ms: 0 = sessions do not resume
  uint32_t rdma_probe_interval_ms =
      2000;  // tunnel.rdma_probe_interval_ms: auto, a session on TCP tries RDMA; 0 = never
  uint32_t rdma_head_start_ms =
      1000;  // tunnel.rdma_head_start_ms: auto, TCP dialled too if RDMA's connect is not done by then; 0 = never
  uint32_t rdma_share = 100;  // tunnel.rdma_share: auto, the percentage of peers whose sessions use RDMA
  // Fleet (docs/configuration.md, "Fleet"); these change on reload.
  std::vector<PeerCidr> peer_cidrs;  // tunnel.peer_cidrs: where `peer: destination` may dial
  uint32_t session_idle_ms =
      300000;  // tunnel.session_idle_ms: on-demand sessions close this long without streams; 0 = never
  uint32_t max_sessions = 1024;    // tunnel.max_sessions: sessions one worker dials, at most
  uint32_t sessions_per_peer = 0;  // tunnel.sessions_per_peer: workers holding a session to one peer; 0 = each
  RdmaConfig rdma;                 // tunnel.rdma
  AuthConfig auth;                 // tunnel.auth
  TunnelLimits limits;             // tunnel.limits
};

// access_log: one line per application connection when it ends
// (proxy/local/access_log.h; docs/configuration.md, "access_log").
struct AccessLogConfig {
  bool enabled = true;
  std::string path;                  // empty: the process log (event=access); else a file, reopened on SIGUSR1
  bool json = false;                 // format: json (one object per line), only with `path`
  uint32_t lines_per_second = 1000;  // per worker, also the burst; past it lines are counted, not written
  bool operator==(const AccessLogConfig&) const = default;
};

// metrics: what GET /metrics says per peer (docs/configuration.md, "metrics").
struct MetricsConfig {
  // Peers with series of their own (peer="NAME"), the most traffic first;
  // the others are summed as peer="(other)". 0: none of their own.
  uint32_t peer_series = 100;
  bool operator==(const MetricsConfig&) const = default;
};

// services: Kubernetes Services and their endpoints, from the file the node
// agent (rdmagw-k8s) writes (docs/kubernetes.md).
// services.direct: when a Service connection may go to its endpoint
// directly rather than through the endpoint's rdmagw (docs/security.md,
// "Mixed fleets").
enum class ServicesDirect {
  kNever,          // every endpoint through its rdmagw; one without rdmagw is refused
  kWithoutRdmagw,  // endpoints the file says have no rdmagw directly; the others only through it
  kFallback,       // also an endpoint whose tunnel port refuses, or that peer_cidrs leaves out
};
std::string_view services_direct_name(ServicesDirect direct);

struct ServicesConfig {
  std::string file;  // absolute path; empty: no services file, no `action: service` routes
  ServicesDirect direct = ServicesDirect::kWithoutRdmagw;
  bool operator==(const ServicesConfig&) const = default;
};

// local_legs: the loopback legs between the applications and rdmagw
// (proxy/local/local_redirect.h; docs/architecture.md, "Local legs past TCP").
struct LocalLegsConfig {
  bool redirect = false;                // past the TCP stack, by sockmap
  std::string cgroup;                   // the cgroup v2 directory holding rdmagw and its applications, or "pod"
  std::string cgroup_fs;                // with cgroup "pod": where the host's cgroup v2 hierarchy is mounted
  uint64_t max_in_flight = 256 * 1024;  // per flow: redirected and not yet read
  bool operator==(const LocalLegsConfig&) const = default;
};

struct Config {
  std::string source_file;
  std::string node;
  std::string admin = "127.0.0.1:9901";
  // admin_token_file: with it, the admin endpoint answers only requests that
  // carry the token (but /live and /ready); the token is read by
  // load_config_file() (and again on every reload).
  std::string admin_token_file;
  std::shared_ptr<const SecretKeys> admin_token;
  unsigned workers = 0;               // 0 in YAML is invalid; the parser fills in nproc when absent
  std::vector<unsigned> worker_cpus;  // worker_cpus: worker i runs on worker_cpus[i % size]; empty = anywhere
  TunnelConfig tunnel;
  std::vector<PeerConfig> peers;
  std::vector<ListenerConfig> listeners;
  std::vector<TargetRule> targets;       // inbound allowlist
  uint32_t shutdown_timeout_ms = 10000;  // shutdown_timeout_ms: drain time on SIGTERM
  std::string log_level = "info";        // log_level: debug | info | warn | error
  AccessLogConfig access_log;            // access_log
  MetricsConfig metrics;                 // metrics
  ServicesConfig services;               // services
  LocalLegsConfig local_legs;            // local_legs

  // The peer_cidrs entry that holds `destination`'s address, if any.
  const PeerCidr* find_peer_cidr(const sockaddr* destination) const {
    for (const auto& c : tunnel.peer_cidrs)
      if (c.cidr.matches(destination)) return &c;
    return nullptr;
  }
  // Whether a peer at `peer` (its end of the session), proven to be node
  // `peer_name` (mode cert; empty otherwise), may open `target`. `peer` null
  // (its address unknown): only entries open to it by name, or to every peer.
  // `facts` decide `tcp:self:PORT` and `services:this-node` entries.
  // `admitted` (may be null): the first entry that admits it.
  TargetRefusal target_refusal(const Endpoint& target, const sockaddr* peer, std::string_view peer_name = {},
                               const TargetFacts& facts = {}, const TargetRule** admitted = nullptr) const;
  bool has_this_node_target() const {
    return std::any_of(targets.begin(), targets.end(), [](const TargetRule& r) { return r.this_node; });
  }
  // Whether any entry lists `target` (a takeover's streams, opened before).
  bool target_listed(const Endpoint& target, const TargetFacts& facts = {}) const {
    for (const auto& rule : targets)
      if (rule.covers(target, facts)) return true;
    return false;
  }
};

struct ConfigError {
  std::string file;
  int line = 0;          // 1-based; 0 when the error has no position (file unreadable)
  int column = 0;        // 1-based
  std::string key_path;  // e.g. "listeners[0].target"
  std::string message;
  // "FILE:LINE:COL: key.path: message"
  std::string to_string() const;
};

struct ConfigResult {
  std::shared_ptr<const Config> config;  // set when errors is empty
  std::vector<ConfigError> errors;
};

// A configuration file larger than this is refused (a wrong path, a log).
inline constexpr uint64_t kMaxConfigFileBytes = 4 * 1024 * 1024;

// Reads and parses the file, and reads the key files it names. Only a
// regular file is read (common/regular_file.h): a FIFO or a device at the
// path is an error at once, never a read that hangs a reload.
ConfigResult load_config_file(const std::string& path);
// Parses `text`; reads no other file unless `read_key_files`.
ConfigResult parse_config_text(const std::string& text, const std::string& file_name, bool read_key_files = false);

}  // namespace rdmagw
