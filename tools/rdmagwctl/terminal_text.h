// SPDX-License-Identifier: Apache-2.0
#pragma once
// Text from the admin endpoint, made safe to print on a terminal. Every
// string in an admin answer may come from outside this host (a peer's node
// name from its tunnel handshake, pod names and API errors from the services
// file) and must not reach the terminal as a control sequence: an ESC, BEL or
// CR in a name could retitle the terminal, clear the screen or overwrite a
// line. rdmagwctl's human output therefore holds no control byte but the
// newlines that end its own lines.
#include <string>
#include <string_view>

#include "tools/rdmagwctl/json.h"

namespace rdmagw::ctl {

// `text` with every byte a terminal could act on written as a visible escape:
// \t \n \r for those, \xHH for the other C0 controls (0x00-0x1f) and DEL
// (0x7f), \u0080..\u009f for the C1 controls (UTF-8 0xC2 0x80..0x9F), \xHH
// for each byte that is not part of well-formed UTF-8, and \\ for a
// backslash, so that an escape in the output always stands for a byte of the
// input. Printable UTF-8 passes through unchanged. One output column per
// escape character, so table widths computed on the result are right.
std::string terminal_text(std::string_view text);

// A copy of `value` with every string, and every object member's name, put
// through terminal_text: what the views (views.h) render from. Numbers,
// booleans and nulls are unchanged.
Json terminal_json(const Json& value);

}  // namespace rdmagw::ctl
