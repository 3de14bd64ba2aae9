// SPDX-License-Identifier: Apache-2.0
// `rdmagwctl top`: one frame of rates, from two GET /stats answers.
#include "tools/rdmagwctl/table.h"
#include "tools/rdmagwctl/view_fields.h"
#include "tools/rdmagwctl/views.h"

namespace rdmagw::ctl {

namespace {

const Json& empty_object() {
  static const Json kEmpty;
  return kEmpty;
}

// The entry of `list` with that name, so a listener added or removed
// between samples does not shift the others' deltas.
const Json& by_name(const Json& list, const std::string& name) {
  for (const auto& entry : list)
    if (string_or(entry, "name") == name) return entry;
  return empty_object();
}

class RateOf {
 public:
  RateOf(const Json& before, const Json& now, double seconds) : before_(before), now_(now), seconds_(seconds) {}
  // Per second; a counter that went down (a restart) counts from zero.
  double operator()(std::string_view key) const {
    uint64_t a = counter(before_, key), b = counter(now_, key);
    uint64_t delta = b >= a ? b - a : b;
    return seconds_ > 0 ? static_cast<double>(delta) / seconds_ : 0;
  }

 private:
  const Json& before_;
  const Json& now_;
  double seconds_;
};

}  // namespace

std::string render_top(const Json& previous_stats, const Json& current_stats, double elapsed_seconds) {
  // Both samples escaped alike, so that names still match between them.
  const Json current = terminal_json(current_stats);
  const Json escaped_previous = terminal_json(previous_stats);
  // A restarted rdmagw (uptime went backwards) starts its counters again.
  bool restarted = number_or(current, "uptime_seconds") < number_or(escaped_previous, "uptime_seconds");
  const Json& previous = restarted ? empty_object() : escaped_previous;

  std::string state = bool_or(current, "draining") ? "draining" : bool_or(current, "ready") ? "ready" : "not ready";
  std::string out = "rdmagw on node " + text_or_dash(current, "node") + ", up " +
                    format_duration_seconds(number_or(current, "uptime_seconds")) + ", " + state + ", transport " +
                    text_or_dash(current, "transport") + "; streams " +
                    counter_text(object_at(current, "streams"), "active") + " active\n";

  Table listeners({{"LISTENER"},
                   {"ACTIVE", Align::kRight},
                   {"ACCEPTS/S", Align::kRight},
                   {"IN/S", Align::kRight},
                   {"OUT/S", Align::kRight},
                   {"ACCEPTED", Align::kRight},
                   {"BYTES IN", Align::kRight},
                   {"BYTES OUT", Align::kRight}});
  const auto& previous_listeners = array_at(previous, "listeners");
  for (const auto& l : array_at(current, "listeners")) {
    if (!bool_or(l, "configured", true) && counter(l, "active") == 0) continue;  // removed and idle: noise
    RateOf rate(by_name(previous_listeners, string_or(l, "name")), l, elapsed_seconds);
    listeners.add_row({text_or_dash(l, "name"), counter_text(l, "active"), format_count_rate(rate("accepted")),
                       format_byte_rate(rate("bytes_received")), format_byte_rate(rate("bytes_sent")),
                       counter_text(l, "accepted"), format_bytes(counter(l, "bytes_received")),
                       format_bytes(counter(l, "bytes_sent"))});
  }
  out += "\n" + listeners.render();

  Table peers({{"PEER"},
               {"TCP", Align::kRight},
               {"RDMA", Align::kRight},
               {"OPENS/S", Align::kRight},
               {"SENT/S", Align::kRight},
               {"RECEIVED/S", Align::kRight},
               {"CREDIT STALLS", Align::kRight},
               {"RECONNECTS", Align::kRight}});
  const auto& previous_peers = array_at(previous, "peers");
  for (const auto& p : array_at(current, "peers")) {
    RateOf rate(by_name(previous_peers, string_or(p, "name")), p, elapsed_seconds);
    peers.add_row({text_or_dash(p, "name"), counter_text(p, "sessions_tcp"), counter_text(p, "sessions_rdma"),
                   format_count_rate(rate("streams_opened")), format_byte_rate(rate("bytes_sent")),
                   format_byte_rate(rate("bytes_received")), counter_text(p, "credit_stalls"),
                   counter_text(p, "reconnects")});
  }
  out += "\n" + peers.render();
  return out;
}

}  // namespace rdmagw::ctl
