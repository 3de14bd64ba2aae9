// SPDX-License-Identifier: Apache-2.0
// `rdmagwctl peers`: one row per tunnel session, and a row for each peer
// that has none, saying why.
#include "tools/rdmagwctl/table.h"
#include "tools/rdmagwctl/view_fields.h"
#include "tools/rdmagwctl/views.h"

namespace rdmagw::ctl {

namespace {

bool any_rdma_session(const Json& peers) {
  for (const auto& p : peers)
    for (const auto& s : array_at(p, "sessions"))
      if (find(s, "rdma")) return true;
  return false;
}

// What is true of the peer as a whole and worth a note on its first row.
std::string peer_note(const Json& peer) {
  std::string note;
  auto add = [&](const std::string& s) { note += (note.empty() ? "" : "; ") + s; };
  std::string state = string_or(peer, "state");
  if (state == "removed") add("removed by a reload, open streams finish");
  if (bool_or(peer, "discovered", false))
    add("found by destination");
  else if (!bool_or(peer, "configured", true))
    add("not configured here (dialed us)");
  if (uint64_t waiting = counter(peer, "waiting_streams"))
    add(std::to_string(waiting) + (waiting == 1 ? " stream" : " streams") + " waiting for a session");
  return note;
}

// The row of a peer without a session: why not, as far as rdmagw knows.
std::string no_session_note(const Json& peer) {
  std::string note = string_or(peer, "state") == "idle" ? "no session (on demand: none needed)" : "no session";
  std::string error = string_or(peer, "last_error"), reason = string_or(peer, "transport_reason");
  std::string closed = string_or(peer, "last_close");
  if (!closed.empty()) note += "; last closed: " + closed;
  if (!error.empty()) note += "; last error: " + error;
  if (!reason.empty()) note += "; transport " + text_or_dash(peer, "transport") + ": " + reason;
  std::string extra = peer_note(peer);
  if (!extra.empty()) note += "; " + extra;
  return note;
}

}  // namespace

std::string render_peers(const Json& raw_answer) {
  const Json answer = terminal_json(raw_answer);
  const auto& peers = array_at(answer, "peers");
  if (peers.empty()) return "no peers (none configured, none connected)\n";
  bool rdma = any_rdma_session(peers);
  std::vector<Column> columns = {{"PEER"},
                                 {"STATE"},
                                 {"TRANSPORT"},
                                 {"ROLE"},
                                 {"WORKER", Align::kRight},
                                 {"REMOTE"},
                                 {"RTT", Align::kRight},
                                 {"STREAMS", Align::kRight},
                                 {"SENT", Align::kRight},
                                 {"RECEIVED", Align::kRight},
                                 {"QUEUED", Align::kRight},
                                 {"CREDIT STALLS", Align::kRight},
                                 {"RESUMES", Align::kRight},
                                 {"RESENT", Align::kRight}};
  if (rdma) {
    columns.push_back({"QP"});
    columns.push_back({"CREDITS", Align::kRight});
    columns.push_back({"IN FLIGHT", Align::kRight});
  }
  columns.push_back({"NOTE"});
  Table table(std::move(columns));

  for (const auto& peer : peers) {
    std::string name = text_or_dash(peer, "name");
    const auto& sessions = array_at(peer, "sessions");
    if (sessions.empty()) {
      std::vector<std::string> row = {name,
                                      text_or_dash(peer, "state"),
                                      text_or_dash(peer, "transport"),
                                      "-",
                                      "-",
                                      "-",
                                      "-",
                                      "-",
                                      "-",
                                      "-",
                                      "-",
                                      "-",
                                      "-",
                                      "-"};
      if (rdma) row.insert(row.end(), {"-", "-", "-"});
      row.push_back(no_session_note(peer));
      table.add_row(std::move(row));
      continue;
    }
    std::string note = peer_note(peer);
    for (const auto& s : sessions) {
      std::string remote = text_or_dash(s, "remote_address");
      std::vector<std::string> row = {name,
                                      text_or_dash(s, "state"),
                                      text_or_dash(s, "transport"),
                                      text_or_dash(s, "role"),
                                      counter_text(s, "worker"),
                                      remote,
                                      format_latency_us(static_cast<double>(int_or(s, "rtt_us", -1))),
                                      counter_text(s, "streams"),
                                      format_bytes(counter(s, "bytes_sent")),
                                      format_bytes(counter(s, "bytes_received")),
                                      format_bytes(counter(s, "queued_bytes")),
                                      counter_text(s, "credit_stalls"),
                                      counter_text(s, "resumes"),
                                      format_bytes(counter(s, "resent_bytes"))};
      if (rdma) {
        if (const Json* q = find(s, "rdma")) {
          row.push_back(text_or_dash(*q, "qp_state"));
          row.push_back(counter_text(*q, "send_credits") + "/" + counter_text(*q, "peer_recv_depth"));
          row.push_back(counter_text(*q, "sends_in_flight"));
        } else {
          row.insert(row.end(), {"-", "-", "-"});
        }
      }
      // The node name matters when it differs from how we know the peer.
      std::string node = string_or(s, "peer_node");
      std::string row_note = note;
      if (!node.empty() && node != string_or(peer, "name"))
        row_note = "node " + node + (row_note.empty() ? "" : "; " + row_note);
      if (int64_t idle = int_or(s, "idle_ms", -1); idle >= 0)
        row_note += (row_note.empty() ? "" : "; ") + std::string("idle ") + std::to_string(idle / 1000) + " s";
      row.push_back(row_note);
      note.clear();  // peer-wide notes once, on the first row
      table.add_row(std::move(row));
    }
  }
  return table.render();
}

}  // namespace rdmagw::ctl
