// SPDX-License-Identifier: Apache-2.0
// `rdmagwctl top`: one frame of rates, from two GET /stats answers.
#include "tools/rdmagwctl/table.h"
#include "tools/rdmagwctl/view_fields.h"
#include "tools/rdmagwctl/views.h"

namespace rdmagw::ctl {

namespace {

const JsonValue& empty_object() {
  static const JsonValue kEmpty;
  return kEmpty;
}

// The entry of `list` with that name, so a listener added or removed
// between samples does not shift the others' deltas.
const JsonValue& by_name(const std::vector<JsonValue>& list, const std::string& name) {
  for (const auto& entry : list)
    if (entry.string_or("name") == name) return entry;
  return empty_object();
}

class RateOf {
 public:
  RateOf(const JsonValue& before, const JsonValue& now, double seconds)
      : before_(before), now_(now), seconds_(seconds) {}
  // Per second; a counter that went down (a restart) counts from zero.
  double operator()(std::string_view key) const {
    uint64_t a = counter(before_, key), b = counter(now_, key);
    uint64_t delta = b >= a ? b - a : b;
    return seconds_ > 0 ? static_cast<double>(delta) / seconds_ : 0;
  }

 private:
  const JsonValue& before_;
  const JsonValue& now_;
  double seconds_;
};

}  // namespace

std::string render_top(const JsonValue& previous_stats, const JsonValue& current, double elapsed_seconds) {
  // A restarted rdmagw (uptime went backwards) starts its counters again.
  bool restarted = current.number_or("uptime_seconds") < previous_stats.number_or("uptime_seconds");
  const JsonValue& previous = restarted ? empty_object() : previous_stats;

  std::string state = current.bool_or("draining") ? "draining" : current.bool_or("ready") ? "ready" : "not ready";
  std::string out = "rdmagw on node " + text_or_dash(current, "node") + ", up " +
                    format_duration_seconds(current.number_or("uptime_seconds")) + ", " + state + ", transport " +
                    text_or_dash(current, "transport") + "; streams " +
                    counter_text(current.object_at("streams"), "active") + " active\n";

  Table listeners({{"LISTENER"},
                   {"ACTIVE", Align::kRight},
                   {"ACCEPTS/S", Align::kRight},
                   {"IN/S", Align::kRight},
                   {"OUT/S", Align::kRight},
                   {"ACCEPTED", Align::kRight},
                   {"BYTES IN", Align::kRight},
                   {"BYTES OUT", Align::kRight}});
  const auto& previous_listeners = previous.array_at("listeners");
  for (const auto& l : current.array_at("listeners")) {
    if (!l.bool_or("configured", true) && counter(l, "active") == 0) continue;  // removed and idle: noise
    RateOf rate(by_name(previous_listeners, l.string_or("name")), l, elapsed_seconds);
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
  const auto& previous_peers = previous.array_at("peers");
  for (const auto& p : current.array_at("peers")) {
    RateOf rate(by_name(previous_peers, p.string_or("name")), p, elapsed_seconds);
    peers.add_row({text_or_dash(p, "name"), counter_text(p, "sessions_tcp"), counter_text(p, "sessions_rdma"),
                   format_count_rate(rate("streams_opened")), format_byte_rate(rate("bytes_sent")),
                   format_byte_rate(rate("bytes_received")), counter_text(p, "credit_stalls"),
                   counter_text(p, "reconnects")});
  }
  out += "\n" + peers.render();
  return out;
}

}  // namespace rdmagw::ctl
