// SPDX-License-Identifier: Apache-2.0
#pragma once
// The stats page served at GET / (docs/admin.md): proxy/admin/stats_page.html,
// one self-contained HTML file (inline CSS and JavaScript) that polls the
// JSON endpoints from the browser. Its bytes are compiled in at build time
// (cmake/embed_file.cmake writes the definition), so the binary needs no
// file beside it and the page is always the one of this build.
#include <string_view>

namespace rdmagw::admin {

// The page's bytes, exactly as in the source file.
std::string_view stats_page_html();

}  // namespace rdmagw::admin
