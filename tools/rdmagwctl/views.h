// SPDX-License-Identifier: Apache-2.0
#pragma once
// The human views of rdmagwctl: each turns an admin answer (docs/admin.md)
// into text, without I/O, so they can be tested on fixed JSON. Fields a
// server does not send print as zero or "-" rather than failing, so an older
// or newer rdmagw still gets a readable answer.
//
// Each view first puts its whole answer through terminal_json
// (terminal_text.h): every string and member name it reads, in table cells
// and in lines alike, is already escaped, and tables measure the escaped
// text. What a view returns holds no control byte but its own newlines.
#include <string>
#include <vector>

#include "tools/rdmagwctl/json.h"
#include "tools/rdmagwctl/terminal_text.h"

namespace rdmagw::ctl {

// `status`: from GET /stats.
std::string render_status(const Json& stats);

// `peers`: from GET /peers.
std::string render_peers(const Json& peers);

// `services`: from GET /services.
std::string render_services(const Json& services);

// `streams`: the rows of one or more GET /streams pages, then
// "showing FIRST-LAST of TOTAL" (FIRST is offset + 1).
std::string render_streams(const Json& streams, int64_t offset, int64_t total);

// One `top` frame: rates are the counter deltas from `previous` to `current`
// (two GET /stats answers) over `elapsed_seconds`.
std::string render_top(const Json& previous, const Json& current, double elapsed_seconds);

// Prefixes every non-empty line with `spaces` spaces.
std::string indent_lines(const std::string& text, int spaces);

}  // namespace rdmagw::ctl
