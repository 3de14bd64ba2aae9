// SPDX-License-Identifier: Apache-2.0
// YAML -> Config. Every problem found is collected as a ConfigError with its
// position and key path; a Config is only returned when there are none.
//
// yaml-cpp 0.7 notes that shape this file:
//  - Node::Mark() is 0-based; errors are 1-based.
//  - A mapping keeps every pair of a duplicated key when iterated, so mappings
//    are always walked pair by pair (never looked up with operator[]), which is
//    how duplicates are found.
//  - A null value's Mark() points at the token after it (often the next line),
//    so errors about an empty value are reported at its key instead.
#include <fcntl.h>
#include <openssl/crypto.h>
#include <sched.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/node_name.h"
#include "common/protocol_limits.h"
#include "common/regular_file.h"
#include "config/config.h"
#include "config/config_keys.h"
#include "config/key_files.h"
#include "config/key_suggestion.h"
#include "config/number_keys.h"
#include "config/yaml_flow_opener.h"

namespace rdmagw {

std::string_view transport_mode_name(TransportMode mode) {
  switch (mode) {
    case TransportMode::kAuto:
      return "auto";
    case TransportMode::kRdma:
      return "rdma";
    case TransportMode::kTcp:
      return "tcp";
  }
  return "auto";
}

std::string TargetRule::endpoint_text() const {
  return this_node ? std::string(kThisNodeTarget)
         : self    ? "tcp:self:" + std::to_string(endpoint_port(target))
                   : target.to_string();
}

std::string TargetRule::to_string() const {
  std::string s = endpoint_text();
  std::vector<std::string> who;
  for (const auto& c : peer_cidrs) who.push_back(c.to_string());
  who.insert(who.end(), peer_names.begin(), peer_names.end());
  for (size_t i = 0; i < who.size(); ++i) s += (i == 0 ? " peers: " : ", ") + who[i];
  if (proxy_protocol) s += " proxy_protocol: v2";
  return s;
}

bool TargetRule::covers(const Endpoint& t, const TargetFacts& facts) const {
  if (this_node) return t.kind == Endpoint::Kind::kTcp && facts.on_this_node && facts.on_this_node(t);
  if (!self) return target == t;
  return t.kind == Endpoint::Kind::kTcp && endpoint_port(t) == endpoint_port(target) && facts.is_local &&
         facts.is_local(t);
}

TargetRefusal Config::target_refusal(const Endpoint& t, const sockaddr* peer, std::string_view peer_name,
                                     const TargetFacts& facts, const TargetRule** admitted) const {
  TargetRefusal why = TargetRefusal::kNotListed;
  auto admit = [&](const TargetRule& rule) {
    if (admitted) *admitted = &rule;
    return TargetRefusal::kNone;
  };
  for (const auto& rule : targets) {
    if (!rule.covers(t, facts)) continue;
    if (rule.peer_cidrs.empty() && rule.peer_names.empty()) return admit(rule);
    for (const RouteMatch& cidr : rule.peer_cidrs)
      if (peer && cidr.matches(peer)) return admit(rule);
    for (const std::string& name : rule.peer_names)
      if (!peer_name.empty() && name == peer_name) return admit(rule);
    why = TargetRefusal::kNotForThisPeer;
  }
  return why;
}

std::string_view auth_mode_name(AuthMode mode) {
  return mode == AuthMode::kPsk ? "psk" : mode == AuthMode::kCert ? "cert" : "none";
}

std::string_view services_direct_name(ServicesDirect direct) {
  switch (direct) {
    case ServicesDirect::kNever:
      return "never";
    case ServicesDirect::kWithoutRdmagw:
      return "without_rdmagw";
    case ServicesDirect::kFallback:
      return "fallback";
  }
  return "?";
}

std::string ConfigError::to_string() const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + key_path + ": " + message;
}

namespace {

constexpr uint64_t kKiB = 1024;
using config_keys::kGiB;
using config_keys::kMiB;
using config_keys::kU32Max;
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr uint16_t kDefaultPeerRdmaPort = 7472;
constexpr unsigned kMaxWorkers = 256;
// listeners[]: max_connections, accepts_per_second, idle_timeout_ms (a day).
constexpr uint64_t kMaxListenerConnections = 10'000'000;
constexpr uint64_t kMaxListenerAcceptRate = 10'000'000;
constexpr uint64_t kMaxIdleTimeoutMs = 86'400'000;
constexpr TransportMode kTransportModes[] = {TransportMode::kAuto, TransportMode::kRdma, TransportMode::kTcp};

// listeners[].target and routes[].target travel in OPEN frames as their
// canonical text (and targets[] is compared with what arrives there), so the
// longest endpoint the parser accepts must fit the protocol's target limit:
// "unix:" + a path of at most sizeof(sun_path) - 1 bytes, or "tcp:[IPv6]:65535".
static_assert(sizeof("unix:") - 1 + sizeof(sockaddr_un::sun_path) - 1 <= kMaxTargetLength,
              "a unix endpoint the parser accepts would not fit in an OPEN frame");
static_assert(sizeof("tcp:[]:65535") - 1 + INET6_ADDRSTRLEN - 1 <= kMaxTargetLength,
              "a tcp endpoint the parser accepts would not fit in an OPEN frame");

using Keys = config_keys::Keys;

// The keys each mapping may hold: config/config_keys.h.
const Keys& kTopKeys = config_keys::kTop;
const Keys& kTunnelKeys = config_keys::kTunnel;
const Keys& kPeerCidrKeys = config_keys::kPeerCidr;
const Keys& kLimitKeys = config_keys::kLimits;
const Keys& kAuthKeys = config_keys::kAuth;
const Keys& kRdmaKeys = config_keys::kRdma;
const Keys& kPeerKeys = config_keys::kPeer;
const Keys& kListenerKeys = config_keys::kListener;
const Keys& kRouteKeys = config_keys::kRoute;
const Keys& kTargetKeys = config_keys::kTarget;
// The route's `peer:` value that means "the host of the original destination".
constexpr std::string_view kPeerByDestination = "destination";
// More is a mistake: rotation needs two (the current key and the next).
inline constexpr size_t kMaxKeyFiles = 8;

// A YAML value together with where it lives: its key path, the position to
// report problems with the value at, and the position of its key.
struct Value {
  YAML::Node node;
  YAML::Mark mark;      // the value's own position, or its key's when the value is null
  YAML::Mark key_mark;  // the key's position (for list items: the list's position)
  std::string path;
};

Value make_value(const YAML::Node& node, const YAML::Mark& fallback, std::string path) {
  return Value{node, node.IsNull() ? fallback : node.Mark(), fallback, std::move(path)};
}

std::string join_path(const std::string& path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return path + "." + std::string(key);
}

std::string index_path(const std::string& path, size_t index) { return path + "[" + std::to_string(index) + "]"; }

// Control bytes are shown as \xNN: a value quoted in an error must not act
// on the terminal that --check prints to.
std::string quote(std::string_view text) {
  constexpr size_t kMaxShown = 80;
  bool cut = text.size() > kMaxShown;
  std::string out = "'";
  for (char c : text.substr(0, kMaxShown)) {
    auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b != 0x7f) {
      out += c;
      continue;
    }
    static constexpr char kHex[] = "0123456789abcdef";
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out + (cut ? "...'" : "'");
}

// How a node is named in messages: the scalar itself, or its kind.
std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return quote(node.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::string join_words(const Keys& words) {
  std::string out;
  for (auto w : words) {
    if (!out.empty()) out += ", ";
    out += w;
  }
  return out;
}

std::string join_words(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ", ";
    out += w;
  }
  return out;
}

bool contains(const Keys& keys, std::string_view key) { return std::find(keys.begin(), keys.end(), key) != keys.end(); }

// Decimal digits only (no sign, no base prefix). Sets *overflow when the digits
// do not fit in 64 bits.
std::optional<uint64_t> parse_decimal(std::string_view text, bool* overflow) {
  *overflow = false;
  if (text.empty()) return std::nullopt;
  for (char c : text)
    if (c < '0' || c > '9') return std::nullopt;
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) {
    *overflow = true;
    return std::nullopt;
  }
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

// 262144 -> "256KiB"; sizes that are not a whole number of KiB stay in bytes.
std::string format_size(uint64_t bytes) {
  if (bytes != 0 && bytes % kGiB == 0) return std::to_string(bytes / kGiB) + "GiB";
  if (bytes != 0 && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + "MiB";
  if (bytes != 0 && bytes % kKiB == 0) return std::to_string(bytes / kKiB) + "KiB";
  return std::to_string(bytes) + " bytes";
}

unsigned default_workers() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) return 1;
  if (n > static_cast<long>(kMaxWorkers)) return kMaxWorkers;
  return static_cast<unsigned>(n);
}

// A tcp listen address used by some part of the config, for clash checks.
struct ListenUse {
  Endpoint endpoint;
  YAML::Mark mark;
  std::string path;
  std::string owner;  // e.g. "listeners[0] (redis)"
};

class Parser {
 public:
  Parser(std::string file, bool read_key_files) : file_(std::move(file)), read_key_files_(read_key_files) {}

  void error(const YAML::Mark& mark, const std::string& path, std::string message) {
    ConfigError e;
    e.file = file_;
    e.line = mark.line >= 0 ? mark.line + 1 : 0;
    e.column = mark.column >= 0 ? mark.column + 1 : 0;
    e.key_path = path.empty() ? "(root)" : path;
    e.message = std::move(message);
    errors_.push_back(std::move(e));
  }

  std::vector<ConfigError> take_errors() {
    std::stable_sort(errors_.begin(), errors_.end(), [](const ConfigError& a, const ConfigError& b) {
      return std::tie(a.line, a.column) < std::tie(b.line, b.column);
    });
    return std::move(errors_);
  }

  void parse(const YAML::Node& root, Config* cfg);

 private:
  using Fields = std::map<std::string, Value, std::less<>>;

  static const Value* find(const Fields& fields, std::string_view key) {
    auto it = fields.find(key);
    return it == fields.end() ? nullptr : &it->second;
  }

  std::optional<Fields> read_map(const Value& v, const Keys& allowed, bool null_is_empty);
  void parse_rdma(const Value& v, Config* cfg);
  void parse_auth(const Value& v, AuthConfig* a);
  void parse_limits(const Value& v, Config* cfg);
  void parse_peer_cidrs(const Value& v, TunnelConfig* t);
  // `v` names a secret file (a tunnel key, the admin token): an absolute
  // path and, when key files are read, a private file (config/key_files.h)
  // whose content goes to *keys. The path when it is valid.
  std::optional<std::string> read_secret_file(const Value& v, SecretKeys* keys);
  bool parse_routes(const Value& v, const std::vector<std::string>& peer_names, const Config& cfg,
                    std::vector<RouteConfig>* routes);
  void parse_services(const Value& v, ServicesConfig* s);
  // A `peer:` value that must name a defined peer.
  bool read_peer_ref(const Value& x, const std::vector<std::string>& peer_names, std::string* out);
  bool read_socket_mode(const Value& x, const ListenerConfig& listener, bool listen_parsed, uint32_t* out);
  bool read_clients(const Value& x, const ListenerConfig& listener, bool listen_parsed, std::vector<RouteMatch>* out);
  // The numeric keys of `section` (config/number_keys.h) that `f` holds,
  // read into *cfg. Returns the names of those whose value was invalid
  // (reported): their relations to other keys are not checked.
  std::set<std::string_view> read_number_keys(const Fields& f, std::string_view section, Config* cfg) {
    std::set<std::string_view> invalid;
    for (const config_keys::NumberKey& k : config_keys::kNumberKeys) {
      if (k.section != section) continue;
      const Value* x = find(f, k.name);
      if (!x) continue;
      auto n = k.form == config_keys::Form::kSize ? get_size(*x, k.min, k.max) : get_uint(*x, k.min, k.max);
      if (n)
        k.set(*cfg, *n);
      else
        invalid.insert(k.name);
    }
    return invalid;
  }
  // Reads one optional numeric field (a byte size when `size`) into *out;
  // returns whether the value, given or default, is valid.
  template <class T>
  bool read_number(const Fields& f, std::string_view key, T* out, uint64_t min, uint64_t max, bool size) {
    const Value* x = find(f, key);
    if (!x) return true;
    auto n = size ? get_size(*x, min, max) : get_uint(*x, min, max);
    if (n) *out = static_cast<T>(*n);
    return n.has_value();
  }
  bool require(const Fields& fields, const Value& map, std::string_view key);
  std::optional<std::vector<Value>> read_list(const Value& v);

  std::optional<std::string> get_string(const Value& v);
  std::optional<uint64_t> get_uint(const Value& v, uint64_t min, uint64_t max);
  std::optional<uint64_t> get_size(const Value& v, uint64_t min, uint64_t max);
  std::optional<uint16_t> get_port(const Value& v);
  std::optional<std::string> get_ip(const Value& v);
  std::optional<Endpoint> get_endpoint(const Value& v);
  // An endpoint, or `tcp:self:PORT` (an entry of targets).
  std::optional<TargetRule> get_target(const Value& v);
  std::optional<std::string> get_choice(const Value& v, const Keys& choices);

  // Returns the tunnel's TCP listen address when address and tcp_port are valid.
  std::optional<ListenUse> parse_tunnel(const Value* v, Config* cfg);
  std::vector<std::string> parse_peers(const Value& v, Config* cfg);
  std::vector<ListenUse> parse_listeners(const Value& v, const std::vector<std::string>& peer_names, Config* cfg);
  void parse_targets(const Value& v, Config* cfg);
  std::string services_file_;  // services.file, read before targets
  void parse_access_log(const Value& v, Config* cfg);
  void parse_metrics(const Value& v, Config* cfg);
  void parse_local_legs(const Value& v, Config* cfg);
  void parse_cert_auth(const Value& v, const Fields& f, const Value* mode, AuthConfig* a);

  std::string file_;
  bool read_key_files_;
  std::vector<ConfigError> errors_;
  std::set<std::string> misspelt_;  // paths of keys an unknown key was taken for ("did you mean")
};

std::optional<Parser::Fields> Parser::read_map(const Value& v, const Keys& allowed, bool null_is_empty) {
  if (v.node.IsNull() && null_is_empty) return Fields{};
  if (!v.node.IsMap()) {
    error(v.mark, v.path, "must be a mapping, got " + describe(v.node));
    return std::nullopt;
  }
  Fields fields;
  for (auto it = v.node.begin(); it != v.node.end(); ++it) {
    // A copy: it-> returns a temporary pair, a reference into it would dangle
    // (AddressSanitizer: stack-use-after-scope).
    YAML::Node key = it->first;
    if (!key.IsScalar()) {
      error(key.Mark(), v.path, "mapping keys must be plain strings, got " + describe(key));
      continue;
    }
    const std::string name = key.Scalar();
    std::string path = join_path(v.path, name);
    if (!contains(allowed, name)) {
      std::optional<std::string_view> meant = closest_key(name, allowed);
      std::string hint;
      if (meant) {
        hint = " (did you mean " + quote(*meant) + "?)";
        // The same slip would also be reported as that key missing: once is enough.
        misspelt_.insert(join_path(v.path, *meant));
      }
      error(key.Mark(), path, "unknown key " + quote(name) + hint + "; allowed keys here: " + join_words(allowed));
      continue;
    }
    auto [pos, inserted] = fields.try_emplace(name, make_value(it->second, key.Mark(), path));
    if (!inserted) {
      error(key.Mark(), path,
            "duplicate key " + quote(name) + " (first given at line " + std::to_string(pos->second.key_mark.line + 1) +
                ", column " + std::to_string(pos->second.key_mark.column + 1) + ")");
    }
  }
  return fields;
}

bool Parser::require(const Fields& fields, const Value& map, std::string_view key) {
  if (fields.count(key)) return true;
  std::string path = join_path(map.path, key);
  if (!misspelt_.count(path)) error(map.mark, path, "required key " + quote(key) + " is missing");
  return false;
}

std::optional<std::vector<Value>> Parser::read_list(const Value& v) {
  std::vector<Value> items;
  if (v.node.IsNull()) return items;  // "key:" with nothing after it: an empty list
  if (!v.node.IsSequence()) {
    error(v.mark, v.path, "must be a list, got " + describe(v.node));
    return std::nullopt;
  }
  size_t index = 0;
  for (const auto& item : v.node) {
    items.push_back(make_value(item, v.mark, index_path(v.path, index)));
    ++index;
  }
  return items;
}

std::optional<std::string> Parser::get_string(const Value& v) {
  if (!v.node.IsScalar() || v.node.Scalar().empty()) {
    error(v.mark, v.path, "must be a non-empty string, got " + describe(v.node));
    return std::nullopt;
  }
  return v.node.Scalar();
}

std::optional<uint64_t> Parser::get_uint(const Value& v, uint64_t min, uint64_t max) {
  if (!v.node.IsScalar()) {
    error(v.mark, v.path, "must be an integer, got " + describe(v.node));
    return std::nullopt;
  }
  const std::string& text = v.node.Scalar();
  std::string_view digits = text;
  bool negative = !digits.empty() && digits.front() == '-';
  if (negative) digits.remove_prefix(1);
  bool overflow = false;
  auto value = parse_decimal(digits, &overflow);
  if (!value && !overflow) {
    error(v.mark, v.path, "must be an integer, got " + quote(text));
    return std::nullopt;
  }
  if (negative || overflow || *value < min || *value > max) {
    error(v.mark, v.path, "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " + text);
    return std::nullopt;
  }
  return value;
}

std::optional<uint64_t> Parser::get_size(const Value& v, uint64_t min, uint64_t max) {
  static const std::string kWhat = "must be a byte size (an integer, or a number with suffix KiB, MiB or GiB), got ";
  if (!v.node.IsScalar()) {
    error(v.mark, v.path, kWhat + describe(v.node));
    return std::nullopt;
  }
  const std::string& text = v.node.Scalar();
  std::string_view rest = text;
  size_t n_digits = 0;
  while (n_digits < rest.size() && rest[n_digits] >= '0' && rest[n_digits] <= '9') ++n_digits;
  std::string_view digits = rest.substr(0, n_digits);
  std::string_view suffix = rest.substr(n_digits);
  if (!suffix.empty() && suffix.front() == ' ') suffix.remove_prefix(1);
  uint64_t unit = 0;
  if (digits.size() == text.size()) {
    unit = 1;
  } else if (suffix == "KiB") {
    unit = kKiB;
  } else if (suffix == "MiB") {
    unit = kMiB;
  } else if (suffix == "GiB") {
    unit = kGiB;
  }
  bool overflow = false;
  auto number = parse_decimal(digits, &overflow);
  if (unit == 0 || (!number && !overflow)) {
    error(v.mark, v.path, kWhat + quote(text));
    return std::nullopt;
  }
  if (number && *number > kU64Max / unit) overflow = true;
  uint64_t bytes = overflow ? 0 : *number * unit;
  if (overflow || bytes < min || bytes > max) {
    std::string range = max == kU64Max ? "must be at least " + format_size(min)
                                       : "must be between " + format_size(min) + " and " + format_size(max);
    std::string got = overflow    ? quote(text) + " (too large)"
                      : unit == 1 ? text
                                  : quote(text) + " (" + std::to_string(bytes) + " bytes)";
    error(v.mark, v.path, range + ", got " + got);
    return std::nullopt;
  }
  return bytes;
}

std::optional<uint16_t> Parser::get_port(const Value& v) {
  auto value = get_uint(v, 1, 65535);
  if (!value) return std::nullopt;
  return static_cast<uint16_t>(*value);
}

std::optional<std::string> Parser::get_ip(const Value& v) {
  if (!v.node.IsScalar() || v.node.Scalar().empty()) {
    error(v.mark, v.path, "must be a numeric IPv4 or IPv6 address, got " + describe(v.node));
    return std::nullopt;
  }
  std::string text = v.node.Scalar();
  std::string err;
  if (!make_tcp_endpoint(text, 1, &err)) {
    error(v.mark, v.path, "must be a numeric IPv4 or IPv6 address, got " + quote(text));
    return std::nullopt;
  }
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
  return text;
}

std::optional<Endpoint> Parser::get_endpoint(const Value& v) {
  if (!v.node.IsScalar() || v.node.Scalar().empty()) {
    error(v.mark, v.path, "must be an endpoint (tcp:IP:PORT or unix:/path), got " + describe(v.node));
    return std::nullopt;
  }
  std::string err;
  auto ep = parse_endpoint(v.node.Scalar(), &err);
  if (!ep) {
    error(v.mark, v.path, "invalid endpoint " + quote(v.node.Scalar()) + ": " + err);
    return std::nullopt;
  }
  return ep;
}

std::optional<TargetRule> Parser::get_target(const Value& v) {
  constexpr std::string_view kSelf = "tcp:self:";
  if (v.node.IsScalar() && v.node.Scalar() == kThisNodeTarget) {
    // The table says which endpoints are this node's: without one, none.
    if (services_file_.empty()) {
      error(
          v.mark, v.path,
          std::string(kThisNodeTarget) + " needs services.file (the table that says which endpoints are this node's)");
      return std::nullopt;
    }
    TargetRule rule;
    rule.this_node = true;
    return rule;
  }
  if (!v.node.IsScalar() || !std::string_view(v.node.Scalar()).starts_with(kSelf)) {
    auto ep = get_endpoint(v);
    return ep ? std::optional<TargetRule>(TargetRule{*ep}) : std::nullopt;
  }
  // The port as any endpoint's; the address stands for this host's own.
  std::string err;
  auto ep = parse_host_port("0.0.0.0:" + v.node.Scalar().substr(kSelf.size()), &err);
  if (!ep) {
    error(v.mark, v.path,
          "invalid endpoint " + quote(v.node.Scalar()) + ": tcp:self: takes a port, 1..65535 (" + err + ")");
    return std::nullopt;
  }
  TargetRule rule;
  rule.target = *ep;
  rule.self = true;
  return rule;
}

std::optional<std::string> Parser::get_choice(const Value& v, const Keys& choices) {
  if (!v.node.IsScalar() || !contains(choices, v.node.Scalar())) {
    error(v.mark, v.path, "must be one of " + join_words(choices) + ", got " + describe(v.node));
    return std::nullopt;
  }
  return v.node.Scalar();
}

void Parser::parse(const YAML::Node& root, Config* cfg) {
  if (!root.IsMap()) {
    error(root.Mark(), "", "the top level must be a mapping of configuration keys, got " + describe(root));
    return;
  }
  Value top{root, root.Mark(), root.Mark(), ""};
  auto fields = *read_map(top, kTopKeys, false);

  if (require(fields, top, "node")) {
    const Value& node = *find(fields, "node");
    if (auto s = get_string(node)) {
      // The node name travels in HELLO, whose length field is one byte, and
      // its peers refuse one outside the rule (common/node_name.h).
      if (s->size() > kMaxNodeNameLength)
        error(node.mark, node.path,
              "must be at most " + std::to_string(kMaxNodeNameLength) +
                  " bytes long (the tunnel handshake carries it), got " + std::to_string(s->size()) +
                  " bytes: " + quote(*s));
      else if (std::string why = node_name_problem(*s); !why.empty())
        error(node.mark, node.path, "not a node name: " + why + ", got " + quote(*s));
      else
        cfg->node = *s;
    }
  }

  std::string ignored;
  std::optional<Endpoint> admin = parse_host_port(cfg->admin, &ignored);
  const Value* admin_value = find(fields, "admin");
  if (admin_value) {
    admin.reset();
    if (auto s = get_string(*admin_value)) {
      std::string err;
      admin = parse_host_port(*s, &err);
      if (admin)
        cfg->admin = *s;
      else
        error(admin_value->mark, admin_value->path,
              "invalid address " + quote(*s) + " (expected IP:PORT or [IPv6]:PORT): " + err);
    }
  }

  const Value* token_value = find(fields, "admin_token_file");
  if (token_value) {
    auto token = std::make_shared<SecretKeys>();
    if (auto path = read_secret_file(*token_value, token.get())) cfg->admin_token_file = *path;
    if (!token->empty()) cfg->admin_token = std::move(token);
  }
  // The admin endpoint drains and reloads: on an address other hosts reach,
  // only with a token.
  if (admin && !is_loopback(*admin) && !token_value)
    error(admin_value ? admin_value->mark : YAML::Mark(), "admin_token_file",
          "admin " + cfg->admin +
              " is reachable from other hosts, so admin_token_file is required (every request but /live and "
              "/ready must then carry it; docs/admin.md), or keep admin on 127.0.0.1");

  cfg->workers = default_workers();
  if (const Value* v = find(fields, "workers")) {
    if (auto n = get_uint(*v, 1, kMaxWorkers)) cfg->workers = static_cast<unsigned>(*n);
  }

  if (const Value* v = find(fields, "worker_cpus")) {
    if (auto items = read_list(*v)) {
      if (items->empty()) error(v->mark, v->path, "an empty list pins nothing; leave worker_cpus out instead");
      for (const auto& item : *items) {
        // CPU_SETSIZE: what a cpu_set_t can name.
        if (auto cpu = get_uint(item, 0, CPU_SETSIZE - 1)) cfg->worker_cpus.push_back(static_cast<unsigned>(*cpu));
      }
    }
  }

  std::optional<ListenUse> tunnel_listen = parse_tunnel(find(fields, "tunnel"), cfg);

  // Mode cert: the certificate says who this node is and where it may be.
  if (const auto& creds = cfg->tunnel.auth.credentials) {
    const Value* node = find(fields, "node");
    if (node && !cfg->node.empty() && cfg->node != creds->name())
      error(node->mark, node->path,
            quote(cfg->node) + " is not the name in tunnel.auth.cert_file's certificate (CN " + quote(creds->name()) +
                "): in mode cert the certificate says who this node is");
    std::string err;
    auto ep = make_tcp_endpoint(cfg->tunnel.address, 0, &err);
    IpBytes ip{};
    bool any = cfg->tunnel.address == "0.0.0.0" || cfg->tunnel.address == "::";
    if (ep && !any && ip_bytes_of(reinterpret_cast<const sockaddr*>(&ep->addr), ep->addr_len, &ip) &&
        std::find(creds->addresses().begin(), creds->addresses().end(), ip) == creds->addresses().end()) {
      std::string listed;
      for (const IpBytes& a : creds->addresses()) listed += (listed.empty() ? "" : ", ") + ip_bytes_text(a);
      error(YAML::Mark(), "tunnel.address",
            cfg->tunnel.address + " is not among the IP addresses of tunnel.auth.cert_file's certificate (" +
                (listed.empty() ? std::string("it lists none") : listed) + "): every peer would refuse this node");
    }
  }

  std::vector<std::string> peer_names;
  if (const Value* v = find(fields, "peers")) peer_names = parse_peers(*v, cfg);

  // Before the listeners: their `action: service` routes need it.
  if (const Value* v = find(fields, "services")) parse_services(*v, &cfg->services);

  std::vector<ListenUse> listens;
  if (const Value* v = find(fields, "listeners")) listens = parse_listeners(*v, peer_names, cfg);

  services_file_ = cfg->services.file;
  if (const Value* v = find(fields, "targets")) parse_targets(*v, cfg);

  if (const Value* v = find(fields, "shutdown_timeout_ms")) {
    if (auto n = get_uint(*v, 0, 600000)) cfg->shutdown_timeout_ms = static_cast<uint32_t>(*n);
  }
  if (const Value* v = find(fields, "log_level")) {
    if (auto s = get_choice(*v, {"debug", "info", "warn", "error"})) cfg->log_level = *s;
  }
  if (const Value* v = find(fields, "access_log")) parse_access_log(*v, cfg);
  if (const Value* v = find(fields, "metrics")) parse_metrics(*v, cfg);
  if (const Value* v = find(fields, "local_legs")) parse_local_legs(*v, cfg);

  // Nothing may listen on the tunnel's own TCP address.
  if (tunnel_listen) {
    for (const auto& l : listens) {
      if (l.endpoint == tunnel_listen->endpoint)
        error(
            l.mark, l.path,
            quote(l.endpoint.to_string()) + " is also the tunnel's own listen address (" + tunnel_listen->owner + ")");
    }
  }
  // The admin address must not clash with the listeners or the tunnel either.
  if (admin) {
    std::vector<ListenUse> others = listens;
    if (tunnel_listen) others.push_back(*tunnel_listen);
    for (const auto& l : others) {
      if (!(l.endpoint == *admin)) continue;
      if (admin_value)
        error(admin_value->mark, admin_value->path, quote(cfg->admin) + " is also the listen address of " + l.owner);
      else
        error(l.mark, l.path,
              quote(l.endpoint.to_string()) + " is also the admin address (default " + cfg->admin + ")");
    }
  }
}

void Parser::parse_rdma(const Value& v, Config* cfg) {
  std::optional<Fields> maybe = read_map(v, kRdmaKeys, true);
  if (!maybe) return;
  const Fields& f = *maybe;
  RdmaConfig* r = &cfg->tunnel.rdma;
  if (const Value* x = find(f, "device")) {
    auto s = get_string(*x);
    if (s) r->device = *s;
  }
  std::set<std::string_view> invalid = read_number_keys(f, "tunnel.rdma", cfg);
  bool slab_ok = !invalid.contains("slab_size");
  bool recv_ok = !invalid.contains("recv_depth");
  // Every session keeps recv_depth buffers posted; a slab that cannot hold
  // a few sessions' worth could never work.
  uint64_t stride = cfg->tunnel.buffer_size + kBufferHeadroom;
  if (slab_ok && recv_ok && r->slab_size < stride * r->recv_depth * 4) {
    const Value* at = find(f, "slab_size") ? find(f, "slab_size") : find(f, "recv_depth");
    if (at)
      error(at->mark, at->path,
            "slab_size " + format_size(r->slab_size) + " is too small: it must hold at least 4 sessions of " +
                std::to_string(r->recv_depth) + " receive buffers of " + format_size(stride) + " (" +
                format_size(stride * r->recv_depth * 4) + ")");
  }
  if (const Value* at = find(f, "max_pinned")) {
    if (read_number(f, "max_pinned", &r->max_pinned, kMiB, 64 * kGiB, true) && slab_ok && recv_ok) {
      if (r->max_pinned > r->slab_size)
        error(at->mark, at->path,
              "max_pinned " + format_size(r->max_pinned) + " is more than slab_size " + format_size(r->slab_size) +
                  ": the sessions' receives are taken from the slab");
      else if (r->max_pinned < stride * r->recv_depth)
        error(at->mark, at->path,
              "max_pinned " + format_size(r->max_pinned) + " is too small for one session's " +
                  std::to_string(r->recv_depth) + " receive buffers of " + format_size(stride) + " (" +
                  format_size(stride * r->recv_depth) + ")");
    }
  }
}

void Parser::parse_limits(const Value& v, Config* cfg) {
  std::optional<Fields> maybe = read_map(v, kLimitKeys, true);
  if (!maybe) return;
  const Fields& f = *maybe;
  const TunnelLimits* l = &cfg->tunnel.limits;
  std::set<std::string_view> invalid = read_number_keys(f, "tunnel.limits", cfg);
  if (!invalid.contains("handshakes") && !invalid.contains("handshakes_per_address") &&
      l->handshakes_per_address > l->handshakes) {
    const Value* at = find(f, "handshakes_per_address") ? find(f, "handshakes_per_address") : find(f, "handshakes");
    error(at->mark, at->path,
          "handshakes_per_address " + std::to_string(l->handshakes_per_address) + " must be at most handshakes " +
              std::to_string(l->handshakes));
  }
}

void Parser::parse_peer_cidrs(const Value& v, TunnelConfig* t) {
  auto items = read_list(v);
  if (!items) return;
  for (const auto& item : *items) {
    PeerCidr entry;
    entry.tcp_port = t->tcp_port;
    entry.rdma_port = t->rdma_port;
    // "10.0.0.0/16", or {cidr: 10.0.0.0/16, tcp_port: P, rdma_port: P}.
    const Value* cidr = &item;
    std::optional<Fields> fields;
    if (item.node.IsMap()) {
      fields = read_map(item, kPeerCidrKeys, false);
      if (!fields) continue;
      if (!require(*fields, item, "cidr")) continue;
      cidr = find(*fields, "cidr");
      bool ok = true;
      if (const Value* x = find(*fields, "tcp_port")) {
        auto p = get_port(*x);
        ok = p.has_value();
        if (p) entry.tcp_port = *p;
      }
      if (const Value* x = find(*fields, "rdma_port")) {
        auto p = get_port(*x);
        ok = p.has_value() && ok;
        if (p) entry.rdma_port = *p;
      }
      if (!ok) continue;
    }
    auto text = get_string(*cidr);
    if (!text) continue;
    std::string err;
    auto m = parse_route_match(*text, &err);
    if (!m) {
      error(cidr->mark, cidr->path, quote(*text) + ": " + err);
      continue;
    }
    if (!m->any_port()) {
      error(cidr->mark, cidr->path,
            quote(*text) + ": a peer CIDR is addresses only; the ports are tcp_port and rdma_port");
      continue;
    }
    entry.cidr = *m;
    t->peer_cidrs.push_back(entry);
  }
}

void Parser::parse_auth(const Value& v, AuthConfig* a) {
  a->configured = true;  // even when invalid: its own errors say what is wrong
  std::optional<Fields> maybe = read_map(v, kAuthKeys, false);
  if (!maybe) return;
  const Fields& f = *maybe;
  const Value* mode = find(f, "mode");
  if (!mode) {
    error(v.mark, v.path, "needs mode: psk (with key_files), cert (with ca_files, cert_file, key_file) or none");
    return;
  }
  std::optional<std::string> name = get_choice(*mode, {"psk", "cert", "none"});
  if (!name) return;
  a->mode = *name == "psk" ? AuthMode::kPsk : *name == "cert" ? AuthMode::kCert : AuthMode::kNone;
  if (const Value* e = find(f, "encrypt")) {
    std::optional<std::string> on = get_choice(*e, {"true", "false"});
    if (on) a->encrypt = *on == "true";
    if (a->encrypt && a->mode == AuthMode::kNone) {
      error(e->mark, e->path, "encryption needs mode psk or cert: its keys come from the authentication");
      a->encrypt = false;  // reported once, here
    }
  }
  // Keys of the other modes are mistakes: say which mode takes them.
  for (const char* key : {"key_files", "ca_files", "cert_file", "key_file"}) {
    const Value* x = find(f, key);
    bool psk_key = std::string_view(key) == "key_files";
    if (!x || (psk_key && a->mode == AuthMode::kPsk) || (!psk_key && a->mode == AuthMode::kCert)) continue;
    error(x->key_mark, x->path,
          std::string(key) + " is for mode " + (psk_key ? "psk" : "cert") + "; mode " + *name +
              (a->mode == AuthMode::kNone ? " takes no key" : " does not use it"));
  }
  if (a->mode == AuthMode::kCert) return parse_cert_auth(v, f, mode, a);
  if (a->mode == AuthMode::kNone) return;
  const Value* files = find(f, "key_files");
  if (!files) {
    error(mode->mark, v.path, "mode psk needs key_files: the files holding the keys (the first proves, each verifies)");
    return;
  }
  std::optional<std::vector<Value>> items = read_list(*files);
  if (!items) return;
  if (items->empty()) error(files->mark, files->path, "mode psk needs at least one key file");
  if (items->size() > kMaxKeyFiles)
    error(files->mark, files->path,
          "has " + std::to_string(items->size()) + " files; at most " + std::to_string(kMaxKeyFiles) +
              " (rotation needs two: the current key and the next)");
  auto keys = std::make_shared<SecretKeys>();
  for (const Value& item : *items)
    if (auto path = read_secret_file(item, keys.get())) a->key_files.push_back(*path);
  if (read_key_files_) a->keys = std::move(keys);
}

void Parser::parse_cert_auth(const Value& v, const Fields& f, const Value* mode, AuthConfig* a) {
  const Value* cas = find(f, "ca_files");
  const Value* cert = find(f, "cert_file");
  const Value* key = find(f, "key_file");
  if (!cas || !cert || !key) {
    error(mode->mark, v.path,
          "mode cert needs ca_files (the fleet's CA certificates), cert_file (this node's certificate) and key_file "
          "(its private key)");
    return;
  }
  auto absolute = [&](const Value& x) -> std::optional<std::string> {
    std::optional<std::string> path = get_string(x);
    if (path && path->front() != '/') {
      error(x.mark, x.path, "must be an absolute path, got " + quote(*path));
      return std::nullopt;
    }
    return path;
  };
  std::vector<std::string> ca_pems;
  bool ok = true;
  if (auto items = read_list(*cas)) {
    if (items->empty()) error(cas->mark, cas->path, "mode cert needs at least one CA certificate file");
    if (items->size() > kMaxKeyFiles)
      error(cas->mark, cas->path,
            "has " + std::to_string(items->size()) + " files; at most " + std::to_string(kMaxKeyFiles) +
                " (a CA's rotation needs two: the current CA and the next)");
    for (const Value& item : *items) {
      auto path = absolute(item);
      if (!path) {
        ok = false;
        continue;
      }
      a->ca_files.push_back(*path);
      std::string pem, why;
      if (read_key_files_ && !read_regular_file(*path, kMaxCertificateFileBytes, &pem, &why)) {
        error(item.mark, item.path, *path + ": " + why);
        ok = false;
      }
      ca_pems.push_back(std::move(pem));
    }
  } else {
    ok = false;
  }
  std::string cert_pem, key_pem, why;
  if (auto path = absolute(*cert)) {
    a->cert_file = *path;
    if (read_key_files_ && !read_regular_file(*path, kMaxCertificateFileBytes, &cert_pem, &why)) {
      error(cert->mark, cert->path, *path + ": " + why);
      ok = false;
    }
  } else {
    ok = false;
  }
  if (auto path = absolute(*key)) {
    a->key_file = *path;
    if (read_key_files_ && !read_private_key_file(*path, &key_pem, &why)) {
      error(key->mark, key->path, *path + ": " + why);
      ok = false;
    }
  } else {
    ok = false;
  }
  if (ok && read_key_files_) {
    std::string problem;
    a->credentials = NodeCredentials::load(ca_pems, cert_pem, key_pem, &problem);
    size_t colon = problem.find(": ");
    if (!a->credentials)
      error(v.mark, v.path + "." + problem.substr(0, colon),
            colon == std::string::npos ? problem : problem.substr(colon + 2));
  }
  OPENSSL_cleanse(key_pem.data(), key_pem.size());
}

void Parser::parse_metrics(const Value& v, Config* cfg) {
  std::optional<Fields> maybe = read_map(v, config_keys::kMetrics, true);
  if (maybe) read_number_keys(*maybe, "metrics", cfg);
}

void Parser::parse_access_log(const Value& v, Config* cfg) {
  std::optional<Fields> maybe = read_map(v, config_keys::kAccessLog, true);
  if (!maybe) return;
  const Fields& f = *maybe;
  AccessLogConfig* a = &cfg->access_log;
  if (const Value* e = find(f, "enabled")) {
    if (auto on = get_choice(*e, {"true", "false"})) a->enabled = *on == "true";
  }
  const Value* path = find(f, "path");
  if (path) {
    if (auto p = get_string(*path)) {
      if (p->empty() || p->front() != '/')
        error(path->mark, path->path, "must be an absolute path, got " + quote(*p));
      else
        a->path = *p;
    }
  }
  if (const Value* format = find(f, "format")) {
    if (auto name = get_choice(*format, {"kv", "json"})) {
      a->json = *name == "json";
      if (a->json && !path)
        error(format->mark, format->path,
              "json needs access_log.path: the process log's lines are key=value (use kv, or give a path)");
    }
  }
  read_number_keys(f, "access_log", cfg);
}

void Parser::parse_local_legs(const Value& v, Config* cfg) {
  std::optional<Fields> maybe = read_map(v, config_keys::kLocalLegs, true);
  if (!maybe) return;
  const Fields& f = *maybe;
  LocalLegsConfig* l = &cfg->local_legs;
  const Value* redirect = find(f, "redirect");
  if (redirect) {
    if (auto on = get_choice(*redirect, {"true", "false"})) l->redirect = *on == "true";
  }
  const Value* cgroup = find(f, "cgroup");
  if (cgroup) {
    if (auto p = get_string(*cgroup)) {
      if (*p != "pod" && (p->empty() || p->front() != '/'))
        error(cgroup->mark, cgroup->path,
              "must be an absolute path (a cgroup v2 directory) or pod (the parent of rdmagw's own cgroup), got " +
                  quote(*p));
      else
        l->cgroup = *p;
    }
  } else if (l->redirect) {
    error(redirect->mark, v.path + ".cgroup",
          "is required with redirect: true (the cgroup v2 directory holding rdmagw and its applications)");
  }
  if (const Value* mount = find(f, "cgroup_fs")) {
    if (auto p = get_string(*mount)) {
      if (p->empty() || p->front() != '/')
        error(mount->mark, mount->path, "must be an absolute path (a cgroup v2 mount), got " + quote(*p));
      else if (l->cgroup != "pod")
        error(mount->mark, mount->path, "is used only with cgroup: pod (it says where to look for rdmagw's cgroup)");
      else
        l->cgroup_fs = *p;
    }
  }
  read_number_keys(f, "local_legs", cfg);
}

void Parser::parse_services(const Value& v, ServicesConfig* s) {
  std::optional<Fields> maybe = read_map(v, config_keys::kServices, false);
  if (!maybe || !require(*maybe, v, "file")) return;
  const Value& file = *find(*maybe, "file");
  if (auto p = get_string(file)) {
    if (p->empty() || p->front() != '/')
      error(file.mark, file.path, "must be an absolute path, got " + quote(*p));
    else
      s->file = *p;
  }
  if (const Value* d = find(*maybe, "direct")) {
    if (auto name = get_choice(*d, {"never", "without_rdmagw", "fallback"}))
      s->direct = *name == "never"            ? ServicesDirect::kNever
                  : *name == "without_rdmagw" ? ServicesDirect::kWithoutRdmagw
                                              : ServicesDirect::kFallback;
  }
}

std::optional<std::string> Parser::read_secret_file(const Value& v, SecretKeys* keys) {
  std::optional<std::string> path = get_string(v);
  if (!path) return std::nullopt;
  if (path->front() != '/') {
    error(v.mark, v.path, "must be an absolute path, got " + quote(*path));
    return std::nullopt;
  }
  if (!read_key_files_) return path;
  std::string secret, why;
  if (read_key_file(*path, &secret, &why))
    keys->add(std::move(secret));
  else
    error(v.mark, v.path, *path + ": " + why);
  return path;
}

std::optional<ListenUse> Parser::parse_tunnel(const Value* v, Config* cfg) {
  std::optional<Fields> maybe = v ? read_map(*v, kTunnelKeys, true) : std::optional<Fields>(Fields{});
  if (!maybe) return std::nullopt;
  const Fields& f = *maybe;
  TunnelConfig* t = &cfg->tunnel;
  bool listen_ok = true;

  if (const Value* x = find(f, "address")) {
    auto ip = get_ip(*x);
    if (ip) t->address = *ip;
    listen_ok = listen_ok && ip.has_value();
  }
  const Value* tcp_port = find(f, "tcp_port");
  if (tcp_port) {
    auto p = get_port(*tcp_port);
    if (p) t->tcp_port = *p;
    listen_ok = listen_ok && p.has_value();
  }
  const Value* rdma_port = find(f, "rdma_port");
  bool rdma_port_ok = true;
  if (rdma_port) {
    auto p = get_port(*rdma_port);
    if (p) t->rdma_port = *p;
    rdma_port_ok = p.has_value();
  }
  bool transport_ok = true;
  if (const Value* x = find(f, "transport")) {
    Keys names;
    for (TransportMode m : kTransportModes) names.push_back(transport_mode_name(m));
    auto s = get_choice(*x, names);
    transport_ok = s.has_value();
    for (TransportMode m : kTransportModes)
      if (s == transport_mode_name(m)) t->transport = m;
  }

  std::set<std::string_view> invalid = read_number_keys(f, "tunnel", cfg);
  auto ok = [&](std::string_view key) { return !invalid.contains(key); };
  bool buffer_ok = ok("buffer_size"), window_ok = ok("stream_window"), budget_ok = ok("session_budget");
  bool interval_ok = ok("keepalive_interval_ms"), timeout_ok = ok("keepalive_timeout_ms");
  t->buffer_size_given = find(f, "buffer_size") != nullptr;
  if (const Value* sp = find(f, "tcp_splice")) {
    std::optional<std::string> on = get_choice(*sp, {"true", "false"});
    if (on) t->tcp_splice = *on == "true";
  }
  if (const Value* r = find(f, "rdma")) parse_rdma(*r, cfg);
  if (const Value* a = find(f, "auth")) parse_auth(*a, &t->auth);
  if (const Value* l = find(f, "limits")) parse_limits(*l, cfg);
  // After the ports: an entry without its own takes the tunnel's.
  if (const Value* c = find(f, "peer_cidrs")) parse_peer_cidrs(*c, t);

  // Cross-field rules. Reported at the dependent key when it was given,
  // otherwise at the key whose value broke the rule against a default.
  std::string prefix = v ? v->path : "tunnel";
  auto relation = [&](std::string_view later, uint64_t later_value, std::string_view earlier, uint64_t earlier_value,
                      const std::string& rule, bool sizes) {
    const Value* at = find(f, later) ? find(f, later) : find(f, earlier);
    if (!at) return;  // both defaults: always consistent
    auto show = [&](std::string_view key, uint64_t n) {
      std::string s = std::string(key) + " " + (sizes ? format_size(n) : std::to_string(n));
      return find(f, key) ? s : s + " (default)";
    };
    error(at->mark, at->path, show(later, later_value) + " " + rule + " " + show(earlier, earlier_value));
  };
  if (buffer_ok && window_ok && t->stream_window < t->buffer_size)
    relation("stream_window", t->stream_window, "buffer_size", t->buffer_size, "must be at least", true);
  if (window_ok && budget_ok && t->session_budget < t->stream_window)
    relation("session_budget", t->session_budget, "stream_window", t->stream_window, "must be at least", true);
  if (interval_ok && timeout_ok && t->keepalive_timeout_ms <= t->keepalive_interval_ms)
    relation("keepalive_timeout_ms", t->keepalive_timeout_ms, "keepalive_interval_ms", t->keepalive_interval_ms,
             "must be greater than", false);
  // Records are opened in user space: there is nothing left to splice.
  if (const Value* sp = find(f, "tcp_splice"); sp && t->tcp_splice && t->auth.authenticates())
    error(sp->mark, sp->path,
          "true does nothing with tunnel.auth.mode " + std::string(auth_mode_name(t->auth.mode)) +
              ": every frame then travels in authenticated records, which rdmagw opens in user space; set it only "
              "on a tunnel without auth");
  // RDMA CM on iWARP-style devices (eRDMA) listens in the TCP port space, so
  // the two tunnel ports would collide whenever RDMA is in use.
  if (listen_ok && rdma_port_ok && transport_ok && t->transport != TransportMode::kTcp && t->tcp_port == t->rdma_port) {
    const Value* at = rdma_port ? rdma_port : tcp_port;
    if (at)
      error(at->mark, at->path,
            "tcp_port and rdma_port are both " + std::to_string(t->tcp_port) +
                "; they must differ unless transport is tcp (RDMA CM listens in the TCP port "
                "space on iWARP devices such as eRDMA)");
  }

  if (!listen_ok) return std::nullopt;
  std::string err;
  auto ep = make_tcp_endpoint(t->address, t->tcp_port, &err);
  if (!ep) return std::nullopt;
  // Secure by default: a tunnel other hosts can reach takes peers only with
  // a key, unless the file says in so many words that it takes anyone.
  if (!t->auth.configured && !is_loopback(*ep)) {
    const Value* address = find(f, "address");
    error(address ? address->mark : YAML::Mark(), prefix + ".auth",
          "tunnel.address " + t->address +
              " is reachable from other hosts, so tunnel.auth is required: `auth: {mode: psk, key_files: "
              "[FILE]}` (docs/security.md), or `auth: {mode: none}` to let any host that reaches it in");
  }
  const Value* at = tcp_port ? tcp_port : find(f, "address");
  ListenUse use;
  use.endpoint = *ep;
  use.mark = at ? at->mark : (v ? v->key_mark : YAML::Mark());
  use.path = at ? at->path : join_path(prefix, "tcp_port");
  use.owner = "tunnel.address + tunnel.tcp_port";
  return use;
}

std::vector<std::string> Parser::parse_peers(const Value& v, Config* cfg) {
  std::vector<std::string> names;           // every syntactically valid name, for references
  std::map<std::string, std::string> seen;  // name -> path of its first use
  auto items = read_list(v);
  if (!items) return names;
  for (const auto& item : *items) {
    auto maybe = read_map(item, kPeerKeys, false);
    if (!maybe) continue;
    const Fields& f = *maybe;
    bool ok = require(f, item, "name");
    ok = require(f, item, "address") && ok;
    ok = require(f, item, "tcp_port") && ok;
    PeerConfig peer;
    peer.rdma_port = kDefaultPeerRdmaPort;
    if (const Value* x = find(f, "name")) {
      auto name = get_string(*x);
      ok = ok && name.has_value();
      if (name) {
        auto [pos, inserted] = seen.try_emplace(*name, item.path);
        if (*name == kPeerByDestination) {
          error(x->mark, x->path,
                quote(*name) +
                    " is reserved: a route's `peer: destination` means the host of the original "
                    "destination");
          ok = false;
        } else if (!inserted) {
          error(x->mark, x->path, "duplicate peer name " + quote(*name) + " (also " + pos->second + ")");
          ok = false;
        } else {
          names.push_back(*name);
        }
        peer.name = *name;
      }
    }
    if (const Value* x = find(f, "address")) {
      auto ip = get_ip(*x);
      ok = ok && ip.has_value();
      if (ip) peer.address = *ip;
    }
    if (const Value* x = find(f, "tcp_port")) {
      auto p = get_port(*x);
      ok = ok && p.has_value();
      if (p) peer.tcp_port = *p;
    }
    if (const Value* x = find(f, "rdma_port")) {
      auto p = get_port(*x);
      ok = ok && p.has_value();
      if (p) peer.rdma_port = *p;
    }
    if (const Value* x = find(f, "connect")) {
      auto c = get_choice(*x, {"on_demand", "always"});
      ok = ok && c.has_value();
      peer.always_connected = c == "always";
    }
    if (!ok) continue;
    std::string err;
    auto ep = make_tcp_endpoint(peer.address, peer.tcp_port, &err);
    if (!ep) {
      error(item.mark, item.path, err);
      continue;
    }
    peer.tcp_endpoint = *ep;
    cfg->peers.push_back(std::move(peer));
  }
  return names;
}

std::vector<ListenUse> Parser::parse_listeners(const Value& v, const std::vector<std::string>& peer_names,
                                               Config* cfg) {
  std::vector<ListenUse> listens;
  std::map<std::string, std::string> seen_names;  // name -> path of its first use
  auto items = read_list(v);
  if (!items) return listens;
  for (const auto& item : *items) {
    auto maybe = read_map(item, kListenerKeys, false);
    if (!maybe) continue;
    const Fields& f = *maybe;
    bool ok = require(f, item, "name");
    ok = require(f, item, "listen") && ok;
    ListenerConfig listener;
    bool listen_parsed = false;
    const Value* listen_value = find(f, "listen");
    listener.transparent =
        listen_value && listen_value->node.IsScalar() && listen_value->node.Scalar().rfind("transparent:", 0) == 0;
    if (listener.transparent) {
      // Where a transparent connection goes is decided per route.
      ok = require(f, item, "routes") && ok;
      for (const char* key : {"peer", "target"}) {
        if (const Value* x = find(f, key)) {
          error(x->mark, x->path, std::string(key) + " is not used by a transparent listener; give each route its own");
          ok = false;
        }
      }
    } else {
      ok = require(f, item, "peer") && ok;
      ok = require(f, item, "target") && ok;
      if (const Value* x = find(f, "routes")) {
        error(x->mark, x->path, "routes need a transparent listener (listen: transparent:IP:PORT)");
        ok = false;
      }
    }
    if (const Value* x = find(f, "name")) {
      auto name = get_string(*x);
      ok = ok && name.has_value();
      if (name) {
        auto [pos, inserted] = seen_names.try_emplace(*name, item.path);
        if (!inserted) {
          error(x->mark, x->path, "duplicate listener name " + quote(*name) + " (also " + pos->second + ")");
          ok = false;
        }
        listener.name = *name;
      }
    }
    if (const Value* x = find(f, "listen")) {
      std::optional<Endpoint> ep;
      if (listener.transparent) {
        std::string err;
        ep = parse_host_port(x->node.Scalar().substr(12), &err);
        if (!ep) error(x->mark, x->path, quote(x->node.Scalar()) + ": " + err);
      } else {
        ep = get_endpoint(*x);
      }
      ok = ok && ep.has_value();
      if (ep) {
        listen_parsed = true;
        listener.listen = *ep;
        std::string owner = item.path + (listener.name.empty() ? "" : " (" + listener.name + ")");
        for (const auto& other : listens) {
          if (other.endpoint == *ep) {
            error(x->mark, x->path, quote(x->node.Scalar()) + " is already the listen address of " + other.owner);
            ok = false;
            break;
          }
        }
        listens.push_back(ListenUse{*ep, x->mark, x->path, owner});
      }
    }
    if (const Value* x = find(f, "peer")) ok = read_peer_ref(*x, peer_names, &listener.peer) && ok;
    if (const Value* x = find(f, "target")) {
      auto ep = get_endpoint(*x);
      ok = ok && ep.has_value();
      if (ep) listener.target = *ep;
    }
    if (listener.transparent) {
      if (const Value* x = find(f, "routes")) ok = parse_routes(*x, peer_names, *cfg, &listener.routes) && ok;
    }
    if (const Value* x = find(f, "socket_mode"))
      ok = read_socket_mode(*x, listener, listen_parsed, &listener.socket_mode) && ok;
    const Value* clients = find(f, "clients");
    if (clients) ok = read_clients(*clients, listener, listen_parsed, &listener.clients) && ok;
    ok = read_number(f, "max_connections", &listener.max_connections, 1, kMaxListenerConnections, false) && ok;
    ok = read_number(f, "accepts_per_second", &listener.accepts_per_second, 1, kMaxListenerAcceptRate, false) && ok;
    ok = read_number(f, "idle_timeout_ms", &listener.idle_timeout_ms, 1000, kMaxIdleTimeoutMs, false) && ok;
    if (listen_parsed && !clients && listener.listen.kind == Endpoint::Kind::kTcp && !is_loopback(listener.listen)) {
      const Value& at = *find(f, "listen");
      error(at.mark, at.path,
            quote(at.node.Scalar()) +
                " may be reached from other hosts, and whoever connects uses the tunnel as this host's applications "
                "do (every target the fleet opens to this node); say who may connect: clients: [CIDR, ...] (e.g. the "
                "pod network), or clients: [0.0.0.0/0] to allow anyone knowingly; or listen on 127.0.0.1");
      ok = false;
    }
    if (ok) cfg->listeners.push_back(std::move(listener));
  }
  return listens;
}

// socket_mode: "0660" (quoted or not: YAML reads an unquoted 0660 as the
// text 0660 here), three or four octal digits, at most 0777; only for a
// unix: listener, where a file carries it.
bool Parser::read_socket_mode(const Value& x, const ListenerConfig& listener, bool listen_parsed, uint32_t* out) {
  auto text = get_string(x);
  if (!text) return false;
  std::string_view digits = *text;
  if (digits.size() == 4 && digits[0] == '0') digits.remove_prefix(1);
  if (digits.size() != 3 || digits.find_first_not_of("01234567") != std::string_view::npos) {
    error(x.mark, x.path, quote(*text) + ": not a file mode; give three octal digits, e.g. \"0660\" or \"0666\"");
    return false;
  }
  if (listen_parsed && listener.listen.kind != Endpoint::Kind::kUnix) {
    error(x.mark, x.path, "socket_mode applies to unix: listeners only (a TCP port has no file to carry it)");
    return false;
  }
  *out = static_cast<uint32_t>(std::stoul(std::string(digits), nullptr, 8));
  if (*out == 0) {
    error(x.mark, x.path, quote(*text) + ": nobody could connect; give the bits to allow, e.g. \"0660\"");
    return false;
  }
  return true;
}

// clients: [CIDR, ...], the addresses that may connect to a TCP listener.
bool Parser::read_clients(const Value& x, const ListenerConfig& listener, bool listen_parsed,
                          std::vector<RouteMatch>* out) {
  if (listen_parsed && listener.listen.kind != Endpoint::Kind::kTcp) {
    error(x.mark, x.path, "clients applies to TCP listeners only (a unix: socket's socket_mode says who connects)");
    return false;
  }
  auto list = read_list(x);
  if (!list) return false;
  if (list->empty()) {
    error(x.mark, x.path, "an empty list lets nobody connect; list the addresses that may, e.g. [10.0.0.0/8]");
    return false;
  }
  bool ok = true;
  for (const auto& c : *list) {
    auto text = get_string(c);
    if (!text) {
      ok = false;
      continue;
    }
    std::string err;
    auto m = parse_route_match(*text, &err);
    if (!m) {
      error(c.mark, c.path, quote(*text) + " is not an address or CIDR (" + err + ")");
      ok = false;
    } else if (!m->any_port()) {
      error(c.mark, c.path, quote(*text) + ": clients are matched by address only, without a port");
      ok = false;
    } else {
      out->push_back(*m);
    }
  }
  return ok;
}

bool Parser::read_peer_ref(const Value& x, const std::vector<std::string>& peer_names, std::string* out) {
  auto peer = get_string(x);
  if (!peer) return false;
  *out = *peer;
  if (std::find(peer_names.begin(), peer_names.end(), *peer) != peer_names.end()) return true;
  error(x.mark, x.path,
        "unknown peer " + quote(*peer) +
            (peer_names.empty() ? "; no peers are defined" : "; defined peers: " + join_words(peer_names)));
  return false;
}

bool Parser::parse_routes(const Value& v, const std::vector<std::string>& peer_names, const Config& cfg,
                          std::vector<RouteConfig>* routes) {
  auto items = read_list(v);
  if (!items) return false;
  if (items->empty()) {
    error(v.mark, v.path, "a transparent listener needs at least one route");
    return false;
  }
  bool all_ok = true;
  for (const auto& item : *items) {
    auto maybe = read_map(item, kRouteKeys, false);
    if (!maybe) {
      all_ok = false;
      continue;
    }
    const Fields& f = *maybe;
    bool ok = require(f, item, "match");
    RouteConfig route;
    if (const Value* x = find(f, "match")) {
      auto text = get_string(*x);
      std::string err;
      auto m = text ? parse_route_match(*text, &err) : std::nullopt;
      if (text && !m) error(x->mark, x->path, quote(*text) + ": " + err);
      ok = ok && m.has_value();
      if (m) route.match = *m;
    }
    const Value* action = find(f, "action");
    if (action) {
      auto a = get_choice(*action, {"tunnel", "passthrough", "reject", "service"});
      ok = ok && a.has_value();
      if (a == "passthrough") route.action = RouteConfig::Action::kPassthrough;
      if (a == "reject") route.action = RouteConfig::Action::kReject;
      if (a == "service") route.action = RouteConfig::Action::kService;
      if (a == "service" && cfg.services.file.empty()) {
        error(action->mark, action->path, "action service needs services.file (where the Services are listed)");
        ok = false;
      }
    }
    if (route.action == RouteConfig::Action::kTunnel) {
      ok = require(f, item, "peer") && ok;
    } else {
      for (const char* key : {"peer", "target"}) {
        if (const Value* x = find(f, key)) {
          error(x->mark, x->path, std::string(key) + " makes no sense with action " + quote(action->node.Scalar()));
          ok = false;
        }
      }
    }
    const Value* peer = find(f, "peer");
    route.by_destination = peer && peer->node.IsScalar() && peer->node.Scalar() == kPeerByDestination;
    if (route.by_destination) {
      // Never a dial to an arbitrary address: the route's addresses must lie
      // in peer_cidrs (and each destination is checked again when it comes).
      bool inside = false;
      for (const auto& c : cfg.tunnel.peer_cidrs) inside = inside || c.cidr.overlaps(route.match);
      if (!inside) {
        error(peer->mark, peer->path,
              cfg.tunnel.peer_cidrs.empty()
                  ? std::string("peer: destination needs tunnel.peer_cidrs (where peers may be found)")
                  : "peer: destination, but match " + quote(route.match.to_string()) +
                        " lies outside every tunnel.peer_cidrs entry");
        ok = false;
      }
    } else if (peer) {
      ok = read_peer_ref(*peer, peer_names, &route.peer) && ok;
    }
    if (const Value* x = find(f, "target")) {
      auto ep = get_endpoint(*x);
      ok = ok && ep.has_value();
      if (ep) {
        route.target = *ep;
        route.has_target = true;
      }
    }
    if (ok) routes->push_back(std::move(route));
    all_ok = all_ok && ok;
  }
  return all_ok;
}

void Parser::parse_targets(const Value& v, Config* cfg) {
  auto items = read_list(v);
  if (!items) return;
  for (const auto& item : *items) {
    // An endpoint, open to every authenticated peer; or {target, peers}.
    if (!item.node.IsMap()) {
      if (auto rule = get_target(item)) cfg->targets.push_back(*rule);
      continue;
    }
    auto fields = read_map(item, kTargetKeys, false);
    if (!fields || !require(*fields, item, "target")) continue;
    auto parsed = get_target(*find(*fields, "target"));
    TargetRule rule;
    bool ok = parsed.has_value();
    if (parsed) rule = *parsed;
    if (const Value* proxy = find(*fields, "proxy_protocol")) {
      auto version = get_string(*proxy);
      if (version && *version == "v2") {
        rule.proxy_protocol = true;
      } else if (version) {
        error(
            proxy->mark, proxy->path,
            quote(*version) + " is not a PROXY protocol version rdmagw sends: v2 (the binary header), or leave it out");
        ok = false;
      } else {
        ok = false;
      }
    }
    const Value* peers_value = find(*fields, "peers");
    if (!peers_value) {
      // Open to every authenticated peer, as an endpoint alone is.
      if (ok) cfg->targets.push_back(std::move(rule));
      continue;
    }
    const Value& peers = *peers_value;
    auto list = read_list(peers);
    if (!list) continue;
    if (list->empty()) {
      error(peers.mark, peers.path, "an empty list lets no peer open it; remove the entry instead");
      continue;
    }
    for (const auto& p : *list) {
      auto text = get_string(p);
      if (!text) {
        ok = false;
        continue;
      }
      std::string err;
      auto m = parse_route_match(*text, &err);
      if (!m && cfg->tunnel.auth.mode == AuthMode::kCert && node_name_problem(*text).empty()) {
        rule.peer_names.push_back(*text);  // a node name, as its certificate proves it
        continue;
      }
      if (!m) {
        // Not an address: a node name, which only mode cert can vouch for.
        error(p.mark, p.path,
              quote(*text) + " is not an address or CIDR (" + err +
                  "); peers are named by node only with "
                  "tunnel.auth.mode cert: in psk mode every key holder may claim any node name");
        ok = false;
        continue;
      }
      if (!m->any_port()) {
        error(p.mark, p.path, quote(*text) + ": a peer is matched by address only, without a port");
        ok = false;
        continue;
      }
      rule.peer_cidrs.push_back(*m);
    }
    if (ok) cfg->targets.push_back(std::move(rule));
  }
}

// Where a second YAML document with content starts, if the text has one.
// Not YAML::LoadAll: on some malformed text (", a") yaml-cpp 0.7's parser
// yields empty documents forever without consuming anything, and LoadAll
// never returns (found by tests/fuzz/fuzz_config). The documents are walked
// here with a bound instead; empty ones (a trailing '---') do not count.
class DocumentCounter final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override { content_.reset(); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { seen(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override { seen(mark); }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    seen(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    seen(mark);
  }
  void OnMapEnd() override {}
  // Where the current document's content begins, if it has any.
  const std::optional<YAML::Mark>& content() const { return content_; }

 private:
  void seen(const YAML::Mark& mark) {
    if (!content_) content_ = mark;
  }
  std::optional<YAML::Mark> content_;
};

std::optional<YAML::Mark> second_document_start(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentCounter counter;
  constexpr int kMaxDocuments = 64;
  for (int i = 0; i < kMaxDocuments && parser.HandleNextDocument(counter); ++i)
    if (i > 0 && counter.content()) return counter.content();
  return std::nullopt;
}

}  // namespace

ConfigResult parse_config_text(const std::string& text, const std::string& file_name, bool read_key_files) {
  Parser parser(file_name, read_key_files);
  auto cfg = std::make_shared<Config>();
  cfg->source_file = file_name;

  ConfigResult result;
  YAML::Node root;
  std::optional<YAML::Mark> second_document;
  try {
    root = YAML::Load(text);
    second_document = second_document_start(text);
  } catch (const YAML::ParserException& e) {
    // A flow left open is reported where the parser gave up: point at the
    // bracket to close instead, under its key.
    std::optional<FlowOpener> opener;
    if (e.msg.find("flow not found") != std::string::npos)
      opener = unclosed_flow_opener(text, e.mark.line + 1, e.mark.column + 1);
    if (opener) {
      YAML::Mark at;
      at.line = opener->line - 1;
      at.column = opener->column - 1;
      parser.error(at, opener->key_path.empty() ? "(yaml)" : opener->key_path,
                   std::string("syntax error: this '") + opener->bracket + "' is never closed (the parser gave up at " +
                       std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) + ": " + e.msg + ")");
    } else {
      parser.error(e.mark, "(yaml)", "syntax error: " + e.msg);
    }
    result.errors = parser.take_errors();
    return result;
  } catch (const YAML::Exception& e) {
    parser.error(e.mark, "(yaml)", e.msg);
    result.errors = parser.take_errors();
    return result;
  }

  if (root.IsNull()) {
    YAML::Mark start;  // line 0, column 0 -> reported as 1:1
    parser.error(start, "", "the configuration is empty; expected a mapping with at least the key 'node'");
  } else {
    if (second_document)
      parser.error(*second_document, "", "only one YAML document is allowed; found another one here");
    try {
      parser.parse(root, cfg.get());
    } catch (const YAML::Exception& e) {  // not expected: nodes are only inspected, never converted
      parser.error(e.mark, "(yaml)", e.msg);
    }
  }

  result.errors = parser.take_errors();
  if (result.errors.empty()) result.config = std::move(cfg);
  return result;
}

ConfigResult load_config_file(const std::string& path) {
  std::string text, why;
  if (!read_regular_file(path, kMaxConfigFileBytes, &text, &why)) {
    ConfigResult result;
    ConfigError e;
    e.file = path;
    e.key_path = "(file)";
    e.message = why;
    result.errors.push_back(std::move(e));
    return result;
  }
  return parse_config_text(text, path, true);
}

}  // namespace rdmagw
