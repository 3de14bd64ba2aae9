// SPDX-License-Identifier: Apache-2.0
// `rdmagwctl streams`: the active streams, oldest first, as the server pages them.
#include "tools/rdmagwctl/table.h"
#include "tools/rdmagwctl/view_fields.h"
#include "tools/rdmagwctl/views.h"

namespace rdmagw::ctl {

std::string render_streams(const Json& page_streams, int64_t offset, int64_t total) {
  const Json streams = terminal_json(page_streams);
  if (total <= 0 && streams.empty()) return "no active streams\n";
  std::string out;
  if (!streams.empty()) {
    Table table({{"SIDE"},
                 {"LISTENER"},
                 {"PEER"},
                 {"CLIENT"},
                 {"TARGET"},
                 {"ID", Align::kRight},
                 {"AGE", Align::kRight},
                 {"FROM APP", Align::kRight},
                 {"TO APP", Align::kRight},
                 {"STATE"},
                 {"WAITING FOR"},
                 {"CONNECTION"}});
    for (const auto& s : streams) {
      uint64_t id = counter(s, "stream_id");
      table.add_row({text_or_dash(s, "side"), text_or_dash(s, "listener"), text_or_dash(s, "peer"),
                     text_or_dash(s, "client"), text_or_dash(s, "target"),
                     id == 0 ? "-" : std::to_string(id),  // 0: no session yet
                     format_duration_ms(counter(s, "age_ms")), format_bytes(counter(s, "bytes_from_app")),
                     format_bytes(counter(s, "bytes_to_app")), text_or_dash(s, "state"), text_or_dash(s, "waiting_for"),
                     text_or_dash(s, "connection")});
    }
    out = table.render();
  }
  if (streams.empty()) {
    out += "showing none of " + std::to_string(total) + " (offset " + std::to_string(offset) + " is past the end)\n";
  } else {
    out += "showing " + std::to_string(offset + 1) + "-" +
           std::to_string(offset + static_cast<int64_t>(streams.size())) + " of " + std::to_string(total) + "\n";
  }
  return out;
}

}  // namespace rdmagw::ctl
