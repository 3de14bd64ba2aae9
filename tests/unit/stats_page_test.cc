// SPDX-License-Identifier: Apache-2.0
// The stats page (proxy/admin/stats_page.html) as built into the binary:
// the bytes are the source file's, and the page keeps the rules it is
// written to: nothing from elsewhere, no markup made from data.
#include "proxy/admin/stats_page.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "test_support.h"

using namespace rdmagw::admin;

namespace {

std::string source_page() { return rdmagw::test::read_source_file("proxy/admin/stats_page.html"); }

}  // namespace

TEST_CASE("stats page: the embedded bytes are the source file's", "[admin][page]") {
  const std::string source = source_page();
  REQUIRE(source.size() > 1000);
  CHECK(stats_page_html().size() == source.size());
  CHECK(stats_page_html() == source);
}

TEST_CASE("stats page: self-contained, and data reaches it only as text", "[admin][page]") {
  const std::string_view page = stats_page_html();
  CHECK(page.starts_with("<!DOCTYPE html>"));
  CHECK(page.find("<meta charset=\"utf-8\">") != std::string_view::npos);
  // No script, style, font or image from another host: it works offline.
  for (const char* external : {"http://", "https://", "src=\"//", "href=\"//", "@import", "url("}) {
    INFO(external);
    CHECK(page.find(external) == std::string_view::npos);
  }
  // Node names, targets and peer names are someone else's text: the page
  // builds its DOM from text nodes, never by parsing markup.
  for (const char* markup : {"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("}) {
    INFO(markup);
    CHECK(page.find(markup) == std::string_view::npos);
  }
  // It reads the JSON endpoints of docs/admin.md, relative to itself.
  for (const char* endpoint : {"\"/stats\"", "\"/peers\"", "\"/streams?limit=\""}) {
    INFO(endpoint);
    CHECK(page.find(endpoint) != std::string_view::npos);
  }
}
