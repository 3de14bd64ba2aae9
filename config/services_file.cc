// SPDX-License-Identifier: Apache-2.0
#include "config/services_file.h"

#include <arpa/inet.h>

#include <nlohmann/json.hpp>
#include <optional>

namespace rdmagw {

namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "rdmagw-services/1";
// Kubernetes names are at most 253 bytes; anything longer is not one.
constexpr size_t kMaxNameBytes = 253;
// api.since and api.error: the agent's words about the API server (an error
// can quote the server's own answer). Longer text is cut here, never
// refused: a long error must not cost the endpoints the file carries.
constexpr size_t kMaxApiTextBytes = 1024;

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
  // past kMaxNameBytes).
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
    if (s.size() > kMaxNameBytes) {
      fail(join(path, key), "longer than " + std::to_string(kMaxNameBytes) + " bytes");
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

  // An address connections may be sent to: never one that would land on
  // this host whatever the file meant (loopback, unspecified: rdmagw's own
  // admin endpoint among others), nor one no pod or Service holds
  // (link-local, multicast, broadcast).
  std::optional<uint32_t> ipv4(const json& value, const std::string& path) {
    in_addr addr{};
    if (!value.is_string() || inet_pton(AF_INET, value.get_ref<const std::string&>().c_str(), &addr) != 1) {
      fail(path, "not an IPv4 address");
      return std::nullopt;
    }
    uint32_t ip = ntohl(addr.s_addr);
    const char* kind = (ip >> 24) == 127      ? "loopback"
                       : (ip >> 24) == 0      ? "unspecified (0.0.0.0/8)"
                       : (ip >> 16) == 0xA9FE ? "link-local (169.254.0.0/16)"
                       : (ip >> 28) == 0xE    ? "multicast (224.0.0.0/4)"
                       : ip == 0xFFFFFFFF     ? "broadcast"
                                              : nullptr;
    if (kind) {
      fail(path, value.get_ref<const std::string&>() + " is " + kind + ": not an address a Service or pod holds");
      return std::nullopt;
    }
    return ip;
  }
};

std::optional<EndpointState> state_named(std::string_view name) {
  if (name == "ready") return EndpointState::kReady;
  if (name == "terminating") return EndpointState::kTerminating;
  if (name == "not-ready") return EndpointState::kNotReady;
  return std::nullopt;
}

}  // namespace

std::string_view endpoint_state_name(EndpointState state) {
  switch (state) {
    case EndpointState::kReady:
      return "ready";
    case EndpointState::kTerminating:
      return "terminating";
    case EndpointState::kNotReady:
      return "not-ready";
  }
  return "?";
}

const ServiceTable::Port* ServiceTable::find_cluster_ip(uint32_t ip, uint16_t port) const {
  auto it = by_cluster_ip_.find(key(ip, port));
  return it == by_cluster_ip_.end() ? nullptr : &ports[it->second];
}

ServiceTable::EndpointRef ServiceTable::find_endpoint(uint32_t ip, uint16_t port) const {
  auto it = by_endpoint_.find(key(ip, port));
  if (it == by_endpoint_.end()) return {};
  const Port& p = ports[it->second.first];
  return {&p, &p.endpoints[it->second.second]};
}

std::string ServiceTable::service_name(const Port& port) const {
  const Service& s = services[port.service];
  return s.namespace_name + "/" + s.name;
}

std::string ipv4_text(uint32_t ip) {
  char text[INET_ADDRSTRLEN] = "?";
  in_addr a{htonl(ip)};
  inet_ntop(AF_INET, &a, text, sizeof(text));
  return text;
}

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

  auto table = std::make_shared<ServiceTable>();
  const json* api = r.member(doc, "", "api", true);
  if (!api) return false;
  if (!api->is_object()) return r.fail("api", "not an object");
  auto reachable = r.boolean(*api, "api", "reachable");
  auto since = reachable ? r.string(*api, "api", "since", false, kMaxApiTextBytes) : std::nullopt;
  auto api_error = since ? r.string(*api, "api", "error", false, kMaxApiTextBytes) : std::nullopt;
  if (!api_error) return false;
  table->api = {*reachable, *since, *api_error};

  const json* services = r.array(doc, "", "services");
  if (!services) return false;
  table->services.reserve(services->size());
  for (size_t si = 0; si < services->size(); ++si) {
    const json& s = (*services)[si];
    const std::string spath = "services[" + std::to_string(si) + "]";
    if (!s.is_object()) return r.fail(spath, "not an object");
    auto ns = r.string(s, spath, "namespace", true);
    auto name = ns ? r.string(s, spath, "name", true) : std::nullopt;
    if (!name) return false;
    ServiceTable::Service service{*ns, *name, {}, {}};
    const json* ips = r.array(s, spath, "cluster_ips");
    const json* ports = ips ? r.array(s, spath, "ports") : nullptr;
    if (!ports) return false;
    for (size_t i = 0; i < ips->size(); ++i) {
      auto ip = r.ipv4((*ips)[i], spath + ".cluster_ips[" + std::to_string(i) + "]");
      if (!ip) return false;
      service.cluster_ips.push_back(*ip);
    }
    const auto service_index = static_cast<uint32_t>(table->services.size());
    for (size_t pi = 0; pi < ports->size(); ++pi) {
      const json& p = (*ports)[pi];
      const std::string ppath = spath + ".ports[" + std::to_string(pi) + "]";
      if (!p.is_object()) return r.fail(ppath, "not an object");
      auto pname = r.string(p, ppath, "name", false);
      auto number = pname ? r.port(p, ppath, "port") : std::nullopt;
      const json* endpoints = number ? r.array(p, ppath, "endpoints") : nullptr;
      if (!endpoints) return false;
      ServiceTable::Port port;
      port.service = service_index;
      port.name = *pname;
      port.port = *number;
      const auto port_index = static_cast<uint32_t>(table->ports.size());
      for (size_t ei = 0; ei < endpoints->size(); ++ei) {
        const json& e = (*endpoints)[ei];
        const std::string epath = ppath + ".endpoints[" + std::to_string(ei) + "]";
        if (!e.is_object()) return r.fail(epath, "not an object");
        const json* address = r.member(e, epath, "address", true);
        auto ip = address ? r.ipv4(*address, epath + ".address") : std::nullopt;
        auto target = ip ? r.port(e, epath, "port") : std::nullopt;
        auto state_text = target ? r.string(e, epath, "state", true) : std::nullopt;
        if (!state_text) return false;
        auto state = state_named(*state_text);
        if (!state) return r.fail(epath + ".state", "\"" + *state_text + "\", not ready, terminating or not-ready");
        auto rdmagw = r.boolean(e, epath, "rdmagw");
        auto pod = rdmagw ? r.string(e, epath, "pod", false) : std::nullopt;
        auto node = pod ? r.string(e, epath, "node", false) : std::nullopt;
        if (!node) return false;
        const auto endpoint_index = static_cast<uint32_t>(port.endpoints.size());
        if (*state == EndpointState::kReady) port.ready.push_back(endpoint_index);
        // The first Service port listing an address answers for it.
        table->by_endpoint_.emplace(ServiceTable::key(*ip, *target), std::make_pair(port_index, endpoint_index));
        port.endpoints.push_back({*ip, *target, *state, *rdmagw, std::move(*pod), std::move(*node)});
      }
      for (uint32_t ip : service.cluster_ips) {
        auto [it, fresh] = table->by_cluster_ip_.emplace(ServiceTable::key(ip, port.port), port_index);
        if (!fresh) {
          const ServiceTable::Port& owner = table->ports[it->second];
          std::string owner_name =
              owner.service == service_index ? service.namespace_name + "/" + service.name : table->service_name(owner);
          return r.fail(ppath, ipv4_text(ip) + ":" + std::to_string(port.port) + " already belongs to " + owner_name);
        }
      }
      table->endpoint_count += port.endpoints.size();
      service.ports.push_back(port_index);
      table->ports.push_back(std::move(port));
    }
    table->services.push_back(std::move(service));
  }
  *out = std::move(table);
  return true;
}

}  // namespace rdmagw
