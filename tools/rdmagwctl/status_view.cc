// SPDX-License-Identifier: Apache-2.0
// `rdmagwctl status`: the whole of GET /stats on one screen.
#include <cstdio>

#include "tools/rdmagwctl/table.h"
#include "tools/rdmagwctl/view_fields.h"
#include "tools/rdmagwctl/views.h"

namespace rdmagw::ctl {

namespace {

std::string plural(uint64_t n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

std::string state_text(const Json& stats) {
  if (bool_or(stats, "draining")) return "draining (not ready: no new connections)";
  return bool_or(stats, "ready") ? "ready" : "not ready";
}

// The config line and, once a reload happened, how the last one went.
std::string config_section(const Json& config) {
  std::string out = "config     " + text_or_dash(config, "file") + "  generation " +
                    counter_text(config, "generation") + ", " + plural(counter(config, "reloads"), "reload") + ", " +
                    counter_text(config, "reload_failures") + " failed\n";
  const Json& last = object_at(config, "last_reload");
  // Before the first reload the server still sends a last_reload object
  // (empty, not ok, unix_time 0): nothing to report yet.
  bool reloaded =
      number_or(last, "unix_time") > 0 || counter(config, "reloads") + counter(config, "reload_failures") > 0;
  if (!reloaded) return out;
  const auto& changes = array_at(last, "changes");
  const auto& errors = array_at(last, "errors");
  if (bool_or(last, "ok")) {
    out += "           last reload ok, " + plural(changes.size(), "change") + (changes.empty() ? "" : ":") + "\n";
    for (const auto& c : changes) out += "             " + string_value(c) + "\n";
  } else {
    out += "           last reload FAILED (the running config was kept):\n";
    for (const auto& e : errors) out += "             " + string_value(e) + "\n";
  }
  return out;
}

std::string listeners_section(const Json& listeners) {
  if (listeners.empty()) return "listeners: none\n";
  Table table({{"NAME"},
               {"LISTEN"},
               {"ACTIVE", Align::kRight},
               {"ACCEPTED", Align::kRight},
               {"BYTES IN", Align::kRight},
               {"BYTES OUT", Align::kRight}});
  for (const auto& l : listeners) {
    // A listener dropped by a reload keeps its totals but no address.
    bool configured = bool_or(l, "configured", true);
    table.add_row({text_or_dash(l, "name"), configured ? text_or_dash(l, "listen") : "(removed)",
                   counter_text(l, "active"), counter_text(l, "accepted"), format_bytes(counter(l, "bytes_received")),
                   format_bytes(counter(l, "bytes_sent"))});
  }
  return "listeners (bytes in: from applications, out: to applications):\n" + indent_lines(table.render(), 2);
}

std::string peers_section(const Json& peers) {
  if (peers.empty()) return "peers: none\n";
  Table table({{"NAME"},
               {"SESSIONS", Align::kRight},
               {"TCP", Align::kRight},
               {"RDMA", Align::kRight},
               {"STREAMS OPENED", Align::kRight},
               {"SENT", Align::kRight},
               {"RECEIVED", Align::kRight},
               {"CREDIT STALLS", Align::kRight},
               {"RECONNECTS", Align::kRight}});
  for (const auto& p : peers) {
    uint64_t tcp = counter(p, "sessions_tcp"), rdma = counter(p, "sessions_rdma");
    table.add_row({text_or_dash(p, "name"), std::to_string(tcp + rdma), std::to_string(tcp), std::to_string(rdma),
                   counter_text(p, "streams_opened"), format_bytes(counter(p, "bytes_sent")),
                   format_bytes(counter(p, "bytes_received")), counter_text(p, "credit_stalls"),
                   counter_text(p, "reconnects")});
  }
  return "peers:\n" + indent_lines(table.render(), 2);
}

std::string streams_section(const Json& streams) {
  std::string out = "streams    " + counter_text(streams, "active") + " active, opened " +
                    counter_text(streams, "opened_outbound") + " outbound, " + counter_text(streams, "opened_inbound") +
                    " inbound\n";
  std::string failed;
  for (const auto& m : object_at(streams, "failed").items()) {
    int64_t n = int_value(m.value()).value_or(0);
    if (n != 0) failed += (failed.empty() ? "" : ", ") + m.key() + " " + std::to_string(n);
  }
  out += "failures   " + (failed.empty() ? std::string("none") : failed) + "\n";
  return out;
}

// local_legs.redirect: said only when configured (an older rdmagw sends none).
std::string local_legs_section(const Json& legs) {
  std::string state = string_or(legs, "state");
  if (state.empty() || state == "off") return "";
  if (state != "redirected")
    return "local legs " + text_or_dash(legs, "state") + ", on TCP (" + text_or_dash(legs, "reason") + ")\n";
  return "local legs redirected past TCP (cgroup " + text_or_dash(legs, "cgroup") +
         "): " + format_bytes(counter(legs, "bytes_redirected")) + " redirected, " +
         format_bytes(counter(legs, "bytes_tcp")) + " by TCP\n";
}

// Means of the latency histograms that have samples.
std::string latency_section(const Json& latency) {
  std::string parts;
  for (const auto& m : latency.items()) {
    uint64_t count = counter(m.value(), "count");
    if (count == 0) continue;
    double mean_us = number_or(m.value(), "sum_seconds") / static_cast<double>(count) * 1e6;
    std::string name = m.key();
    for (char& c : name)
      if (c == '_') c = ' ';
    parts += (parts.empty() ? "" : ", ") + name + " " + format_latency_us(mean_us) + " (" + std::to_string(count) + ")";
  }
  return parts.empty() ? "" : "latency    mean " + parts + "\n";
}

}  // namespace

std::string indent_lines(const std::string& text, int spaces) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    size_t end = nl == std::string::npos ? text.size() : nl + 1;
    if (end - start > 1 || text[start] != '\n') out.append(static_cast<size_t>(spaces), ' ');
    out.append(text, start, end - start);
    start = end;
  }
  return out;
}

std::string render_status(const Json& answer) {
  const Json stats = terminal_json(answer);
  std::string commit = string_or(stats, "commit");
  std::string out = "rdmagw " + text_or_dash(stats, "version") + (commit.empty() ? "" : " (commit " + commit + ")") +
                    " on node " + text_or_dash(stats, "node") + ", up " +
                    format_duration_seconds(number_or(stats, "uptime_seconds")) + ", " +
                    plural(counter(stats, "workers"), "worker") + "\n";
  out += "state      " + state_text(stats) + "\n";
  std::string reason = string_or(stats, "transport_reason");
  out += "transport  " + text_or_dash(stats, "transport") + (reason.empty() ? "" : " (" + reason + ")") + "\n";
  if (!string_or(stats, "io_uring").empty()) out += "io_uring   " + string_or(stats, "io_uring") + "\n";
  out += local_legs_section(object_at(stats, "local_legs"));
  out += config_section(object_at(stats, "config"));
  out += streams_section(object_at(stats, "streams"));
  out += latency_section(object_at(stats, "latency"));
  out += "\n" + listeners_section(array_at(stats, "listeners"));
  out += "\n" + peers_section(array_at(stats, "peers"));
  return out;
}

}  // namespace rdmagw::ctl
