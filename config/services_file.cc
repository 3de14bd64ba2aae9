// SPDX-License-Identifier: Apache-2.0
#include "config/services_file.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "config/services_table_builder.h"

namespace rdmagw {

namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "rdmagw-services/1";

// Reading one field: each returns nullopt/false after writing *error, which
// names the field by its path.
struct Reader {
  std::string* error;

  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : path + "." + key;
  }

  bool fail(const std::string& path, std::string_view why) {
    *error = path + ": " + std::string(why);
    return false;
  }

  const json* member(const json& object, const std::string& path, const char* key, bool required) {
    auto it = object.find(key);
    if (it == object.end()) {
      if (required) fail(join(path, key), "missing");
      return nullptr;
    }
    return &*it;
  }

  const json* array(const json& object, const std::string& path, const char* key) {
    const json* value = member(object, path, key, true);
    if (!value) return nullptr;
    if (!value->is_array()) {
      fail(join(path, key), "not a list");
      return nullptr;
    }
    return value;
  }

  // `cut_at`: longer text is shortened to this many bytes (0: refused
  // past kMaxServiceNameBytes).
  std::optional<std::string> string(const json& object, const std::string& path, const char* key, bool required,
                                    size_t cut_at = 0) {
    const json* value = member(object, path, key, required);
    if (!value) return required ? std::nullopt : std::optional<std::string>(std::string());
    if (!value->is_string()) {
      fail(join(path, key), "not a string");
      return std::nullopt;
    }
    const auto& s = value->get_ref<const std::string&>();
    if (cut_at && s.size() > cut_at) {
      size_t end = cut_at;
      while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;  // not inside a character
      return s.substr(0, end) + "...";
    }
    if (cut_at) return s;
    if (s.size() > kMaxServiceNameBytes) {
      fail(join(path, key), "longer than " + std::to_string(kMaxServiceNameBytes) + " bytes");
      return std::nullopt;
    }
    // Names are shown to operators (rdmagwctl services, the log): a control
    // byte in one is no Kubernetes name.
    for (char c : s) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        fail(join(path, key), "holds a control byte: not a Kubernetes name");
        return std::nullopt;
      }
    }
    return s;
  }

  std::optional<bool> boolean(const json& object, const std::string& path, const char* key) {
    const json* value = member(object, path, key, true);
    if (!value) return std::nullopt;
    if (!value->is_boolean()) {
      fail(join(path, key), "not true or false");
      return std::nullopt;
    }
    return value->get<bool>();
  }

  std::optional<uint16_t> port(const json& object, const std::string& path, const char* key) {
    const json* value = member(object, path, key, true);
    if (!value) return std::nullopt;
    if (!value->is_number_integer() || value->get<int64_t>() < 1 || value->get<int64_t>() > 65535) {
      fail(join(path, key), "not a port (an integer from 1 to 65535)");
      return std::nullopt;
    }
    return static_cast<uint16_t>(value->get<int64_t>());
  }

  // An address connections may be sent to, IPv4 or IPv6: never one that
  // would land on this host whatever the file meant (loopback, unspecified:
  // rdmagw's own admin endpoint among others), nor one no pod or Service
  // holds (link-local, multicast, broadcast). A v4-mapped IPv6 address is
  // the IPv4 address it holds (the table's form for IPv4).
  std::optional<services_table::AddressRecord> address(const json& value, const std::string& path) {
    services_table::AddressRecord a{};
    const char* text = value.is_string() ? value.get_ref<const std::string&>().c_str() : nullptr;
    if (!text || !service_address::parse(text, &a)) {
      fail(path, "not an IPv4 or IPv6 address");
      return std::nullopt;
    }
    if (const char* kind = service_address::refused(a)) {
      fail(path, std::string(text) + " is " + kind + ": not an address a Service or pod holds");
      return std::nullopt;
    }
    return a;
  }
};

std::optional<EndpointState> state_named(std::string_view name) {
  if (name == "ready") return EndpointState::kReady;
  if (name == "terminating") return EndpointState::kTerminating;
  if (name == "not-ready") return EndpointState::kNotReady;
  return std::nullopt;
}

}  // namespace

bool parse_services_file(std::string_view text, std::shared_ptr<const ServiceTable>* out, std::string* error) {
  if (text.size() > kMaxServicesFileBytes) {
    *error = "larger than " + std::to_string(kMaxServicesFileBytes) + " bytes";
    return false;
  }
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 7: ...":
    // the part after the bracket is what a reader needs.
    std::string what = e.what();
    auto close = what.find("] ");
    *error = "not JSON: " + (close == std::string::npos ? what : what.substr(close + 2));
    return false;
  }
  Reader r{error};
  if (!doc.is_object()) return r.fail("(top)", "not an object");
  auto format = r.string(doc, "", "format", true);
  if (!format) return false;
  if (*format != kFormat)
    return r.fail("format", "\"" + *format + "\", not \"" + std::string(kFormat) + "\" (another agent version?)");

  ServiceTableBuilder table;
  const json* api = r.member(doc, "", "api", true);
  if (!api) return false;
  if (!api->is_object()) return r.fail("api", "not an object");
  auto reachable = r.boolean(*api, "api", "reachable");
  auto since = reachable ? r.string(*api, "api", "since", false, kMaxApiTextBytes) : std::nullopt;
  auto api_error = since ? r.string(*api, "api", "error", false, kMaxApiTextBytes) : std::nullopt;
  if (!api_error) return false;
  table.set_api(*reachable, *since, *api_error);

  // Nodes whose node-mode rdmagw accepts tunnels (absent in files from
  // before there were any: none).
  if (const json* nodes = r.member(doc, "", "nodes", false)) {
    if (!nodes->is_array()) return r.fail("nodes", "not a list");
    for (size_t ni = 0; ni < nodes->size(); ++ni) {
      const json& n = (*nodes)[ni];
      const std::string npath = "nodes[" + std::to_string(ni) + "]";
      if (!n.is_object()) return r.fail(npath, "not an object");
      auto name = r.string(n, npath, "name", true);
      const json* tunnel = name ? r.member(n, npath, "tunnel", true) : nullptr;
      auto ip = tunnel ? r.address(*tunnel, npath + ".tunnel") : std::nullopt;
      if (!ip) return false;
      if (name->empty()) return r.fail(npath + ".name", "empty");
      std::string why;
      if (!table.add_node_tunnel(*name, *ip, &why)) return r.fail(npath, why);
    }
  }

  const json* services = r.array(doc, "", "services");
  if (!services) return false;
  std::vector<services_table::AddressRecord> cluster_ips;
  for (size_t si = 0; si < services->size(); ++si) {
    const json& s = (*services)[si];
    const std::string spath = "services[" + std::to_string(si) + "]";
    if (!s.is_object()) return r.fail(spath, "not an object");
    auto ns = r.string(s, spath, "namespace", true);
    auto name = ns ? r.string(s, spath, "name", true) : std::nullopt;
    if (!name) return false;
    const json* ips = r.array(s, spath, "cluster_ips");
    const json* ports = ips ? r.array(s, spath, "ports") : nullptr;
    if (!ports) return false;
    cluster_ips.clear();
    for (size_t i = 0; i < ips->size(); ++i) {
      auto ip = r.address((*ips)[i], spath + ".cluster_ips[" + std::to_string(i) + "]");
      if (!ip) return false;
      cluster_ips.push_back(*ip);
    }
    table.add_service(*ns, *name, cluster_ips);
    for (size_t pi = 0; pi < ports->size(); ++pi) {
      const json& p = (*ports)[pi];
      const std::string ppath = spath + ".ports[" + std::to_string(pi) + "]";
      if (!p.is_object()) return r.fail(ppath, "not an object");
      auto pname = r.string(p, ppath, "name", false);
      auto number = pname ? r.port(p, ppath, "port") : std::nullopt;
      const json* endpoints = number ? r.array(p, ppath, "endpoints") : nullptr;
      if (!endpoints) return false;
      std::string taken;
      if (!table.add_port(*pname, *number, &taken)) return r.fail(ppath, taken);
      for (size_t ei = 0; ei < endpoints->size(); ++ei) {
        const json& e = (*endpoints)[ei];
        const std::string epath = ppath + ".endpoints[" + std::to_string(ei) + "]";
        if (!e.is_object()) return r.fail(epath, "not an object");
        const json* address = r.member(e, epath, "address", true);
        auto ip = address ? r.address(*address, epath + ".address") : std::nullopt;
        auto target = ip ? r.port(e, epath, "port") : std::nullopt;
        auto state_text = target ? r.string(e, epath, "state", true) : std::nullopt;
        if (!state_text) return false;
        auto state = state_named(*state_text);
        if (!state) return r.fail(epath + ".state", "\"" + *state_text + "\", not ready, terminating or not-ready");
        auto rdmagw = r.boolean(e, epath, "rdmagw");
        auto pod = rdmagw ? r.string(e, epath, "pod", false) : std::nullopt;
        auto node = pod ? r.string(e, epath, "node", false) : std::nullopt;
        if (!node) return false;
        table.add_endpoint(*ip, *target, *state, *rdmagw, *pod, *node);
      }
    }
  }
  // What the builder wrote is checked like a table from a file: one rule
  // for both (and a builder fault is an error here, not a crash later).
  std::string why;
  auto opened = ServiceTable::open(table.finish(), &why);
  if (!opened) return r.fail("(table)", why);
  *out = std::move(opened);
  return true;
}

}  // namespace rdmagw
