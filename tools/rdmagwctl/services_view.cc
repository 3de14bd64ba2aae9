// SPDX-License-Identifier: Apache-2.0
// `rdmagwctl services`: where the Services came from (the file, whether its
// writer reached the API server), then one row per endpoint of each port.
#include "tools/rdmagwctl/table.h"
#include "tools/rdmagwctl/view_fields.h"
#include "tools/rdmagwctl/views.h"

namespace rdmagw::ctl {

namespace {

std::string source_line(const Json& status) {
  std::string file = string_or(status, "file");
  if (file.empty()) return "no services file (services.file is not set)\n";
  std::string out = "file " + file + ": ";
  if (!bool_or(status, "loaded"))
    out += "not loaded";
  else
    out += counter_text(status, "services") + " services, " + counter_text(status, "endpoints") + " endpoints";
  std::string error = string_or(status, "error");
  if (!error.empty())
    out += "; last read failed: " + error + (bool_or(status, "loaded") ? " (older table in use)" : "");
  out += "\n";
  if (bool_or(status, "loaded")) {
    const Json& api = object_at(status, "api");
    if (bool_or(api, "reachable"))
      out += "API server: reachable since " + text_or_dash(api, "since") + "\n";
    else
      out += "API server: UNREACHABLE since " + text_or_dash(api, "since") + " (" + text_or_dash(api, "error") +
             "); the last known endpoints stay in use\n";
  }
  return out;
}

// The RDMAGW column: through the endpoint's rdmagw or its node's (and how
// the tunnel stands), or not: directly, or refused (services.direct: never).
std::string rdmagw_text(const Json& endpoint, const std::string& direct) {
  std::string node = string_or(endpoint, "node_rdmagw");
  if (!bool_or(endpoint, "rdmagw") && node.empty()) return direct == "never" ? "no (refused)" : "no (direct)";
  std::string out = node.empty() ? "yes" : "node's at " + node;
  std::string tunnel = string_or(endpoint, "tunnel");
  if (tunnel.empty()) return out;
  std::string error = string_or(endpoint, "tunnel_error");
  return out + ", tunnel " + tunnel + (error.empty() ? "" : ": " + error);
}

// "10.0.1.5:6379", "[fd00::5]:6379": an IPv6 address in brackets, or its
// last group would read as the port.
std::string address_and_port(const Json& endpoint) {
  std::string address = string_or(endpoint, "address");
  if (address.find(':') != std::string::npos) address = "[" + address + "]";
  return address + ":" + counter_text(endpoint, "port");
}

}  // namespace

std::string render_services(const Json& raw_answer) {
  const Json answer = terminal_json(raw_answer);
  std::string out = source_line(object_at(answer, "services"));
  std::string direct = string_or(answer, "direct");
  if (!direct.empty()) out += "services.direct: " + direct + "\n";
  const Json& services = array_at(answer, "table");
  if (services.empty()) return out;
  Table table({{"SERVICE"},
               {"CLUSTER IP"},
               {"PORT"},
               {"ENDPOINT"},
               {"STATE"},
               {"RDMAGW"},
               {"STREAMS", Align::kRight},
               {"POD"},
               {"NODE"}});
  for (const auto& service : services) {
    std::string name = string_or(service, "namespace") + "/" + string_or(service, "name");
    std::string ips;
    for (const auto& ip : array_at(service, "cluster_ips")) ips += (ips.empty() ? "" : ",") + string_value(ip);
    if (ips.empty()) ips = "None (headless)";
    for (const auto& port : array_at(service, "ports")) {
      std::string port_text = counter_text(port, "port");
      if (!string_or(port, "name").empty()) port_text += " (" + string_or(port, "name") + ")";
      const Json& endpoints = array_at(port, "endpoints");
      if (endpoints.empty()) table.add_row({name, ips, port_text, "-", "no endpoints"});
      for (const auto& e : endpoints)
        table.add_row({name, ips, port_text, address_and_port(e), text_or_dash(e, "state"), rdmagw_text(e, direct),
                       counter_text(e, "streams"), text_or_dash(e, "pod"), text_or_dash(e, "node")});
    }
  }
  return out + table.render();
}

}  // namespace rdmagw::ctl
