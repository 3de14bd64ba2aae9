// SPDX-License-Identifier: Apache-2.0
// How values appear in log lines (common/log.h): a value a peer chose (its
// node name in HELLO, a target in OPEN) must not reach a terminal or a log
// file as control bytes, nor forge a line.
#include "common/log.h"

#include <catch2/catch.hpp>
#include <string>

using rdmagw::log::format_value;

TEST_CASE("log values: plain words stay as they are") {
  CHECK(format_value("host-a") == "host-a");
  CHECK(format_value("tcp:10.0.0.5:6379") == "tcp:10.0.0.5:6379");
}

TEST_CASE("log values: spaces, quotes and backslashes are quoted and escaped") {
  CHECK(format_value("") == "\"\"");
  CHECK(format_value("a b") == "\"a b\"");
  CHECK(format_value("say \"hi\"") == "\"say \\\"hi\\\"\"");
  CHECK(format_value("a\\b") == "\"a\\\\b\"");
  CHECK(format_value("k=v") == "\"k=v\"");
}

TEST_CASE("log values: control bytes a peer sends are written as escapes, never raw") {
  // ESC [ 2 J clears a terminal; CR rewrites the line; BEL rings; a newline forges a line.
  std::string hostile = std::string("evil\x1b[2J\r\x07") + "\nfake event=ok" + std::string(1, '\0') + "\x7f";
  std::string out = format_value(hostile);
  CHECK(out == "\"evil\\x1b[2J\\x0d\\x07\\nfake event=ok\\x00\\x7f\"");
  for (char c : out) CHECK((static_cast<unsigned char>(c) >= 0x20 && c != 0x7f));
}

TEST_CASE("log values: valid UTF-8 passes, bytes of invalid UTF-8 are escaped") {
  CHECK(format_value("caf\xc3\xa9") == "\"caf\xc3\xa9\"");
  CHECK(format_value("x\x9b"
                     "1m") == "\"x\\x9b1m\"");          // a lone C1 CSI byte
  CHECK(format_value("\xc0\xaf") == "\"\\xc0\\xaf\"");  // an overlong form
}
