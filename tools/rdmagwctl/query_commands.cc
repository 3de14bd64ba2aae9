// SPDX-License-Identifier: Apache-2.0
// status, peers, services, streams: read-only views of one or more GET answers.
#include <cstdio>
#include <vector>

#include "tools/rdmagwctl/commands.h"
#include "tools/rdmagwctl/terminal_text.h"
#include "tools/rdmagwctl/views.h"

namespace rdmagw::ctl {

namespace {

// The page size for --all: big pages mean few requests, and the server caps
// a page at 10000 streams anyway.
constexpr int64_t kAllPageSize = 1000;

void print_json(const Json& value) { printf("%s\n", to_json(value).c_str()); }

// GET `target` and print it as JSON or through `render`.
template <typename Render>
int show(const CommandContext& ctx, const char* target, Render render) {
  Json answer;
  std::string error;
  if (!ctx.admin.get_json(target, &answer, &error)) {
    print_error(error);
    return kExitFailure;
  }
  if (ctx.json)
    print_json(answer);
  else
    fputs(render(answer).c_str(), stdout);
  return kExitOk;
}

std::string streams_target(int64_t offset, int64_t limit) {
  std::string target = "/streams?offset=" + std::to_string(offset);
  if (limit > 0) target += "&limit=" + std::to_string(limit);
  return target;
}

}  // namespace

void print_error(const std::string& message) { fprintf(stderr, "rdmagwctl: %s\n", terminal_text(message).c_str()); }

int run_status(const CommandContext& ctx) { return show(ctx, "/stats", render_status); }

int run_peers(const CommandContext& ctx) { return show(ctx, "/peers", render_peers); }

// The whole configuration in effect: already a document to read, so JSON
// either way (pretty-printed, control characters escaped).
int run_config(const CommandContext& ctx) {
  return show(ctx, "/config", [](const Json& answer) { return to_json(answer) + "\n"; });
}

int run_services(const CommandContext& ctx) { return show(ctx, "/services", render_services); }

int run_streams(const CommandContext& ctx, const StreamsOptions& options) {
  std::string error;
  Json page;
  if (!options.all) {
    if (!ctx.admin.get_json(streams_target(options.offset, options.limit), &page, &error)) {
      print_error(error);
      return kExitFailure;
    }
    if (ctx.json)
      print_json(page);
    else
      fputs(render_streams(array_at(page, "streams"), options.offset, int_or(page, "total")).c_str(), stdout);
    return kExitOk;
  }

  // --all: page until a short or empty page. Streams open and close between
  // requests, so the total may move; the last page's total is reported, and
  // a stream may be missed or seen twice, as with any paged listing.
  int64_t page_size = options.limit > 0 ? options.limit : kAllPageSize;
  int64_t offset = options.offset, total = 0;
  Json streams = Json::array();
  for (int pages = 0; pages < 1'000'000; ++pages) {
    if (!ctx.admin.get_json(streams_target(offset, page_size), &page, &error)) {
      print_error(error);
      return kExitFailure;
    }
    const auto& items = array_at(page, "streams");
    total = int_or(page, "total");
    for (const auto& item : items) streams.push_back(item);
    offset += static_cast<int64_t>(items.size());
    if (static_cast<int64_t>(items.size()) < page_size || offset >= total) break;
  }
  if (ctx.json) {
    // The server's page shape, holding every stream.
    Json all = Json::object();
    all["total"] = total;
    all["offset"] = options.offset;
    all["limit"] = streams.size();
    all["streams"] = std::move(streams);
    print_json(all);
  } else {
    fputs(render_streams(streams, options.offset, total).c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace rdmagw::ctl
