// SPDX-License-Identifier: Apache-2.0
// reload, drain and undrain, the POST endpoints that change the running
// rdmagw, and ready, the health check.
#include <chrono>
#include <cstdio>
#include <thread>

#include "tools/rdmagwctl/commands.h"
#include "tools/rdmagwctl/terminal_text.h"

namespace rdmagw::ctl {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kDrainPollInterval = std::chrono::milliseconds(500);

HttpRequest post(const char* target) {
  HttpRequest request;
  request.method = "POST";
  request.target = target;
  return request;
}

// Active streams according to GET /stats, or -1 (with the error printed).
int64_t active_streams(const CommandContext& ctx) {
  Json stats;
  std::string error;
  if (!ctx.admin.get_json("/stats", &stats, &error)) {
    print_error(error);
    return -1;
  }
  return int_or(object_at(stats, "streams"), "active");
}

// Polls until no stream is left or the timeout passes. Progress goes to
// stdout, or to stderr under --json so that stdout stays one JSON document.
int wait_for_drain(const CommandContext& ctx, const DrainOptions& options) {
  FILE* progress = ctx.json ? stderr : stdout;
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(options.wait_timeout_seconds));
  int64_t last_reported = -1;
  for (;;) {
    int64_t left = active_streams(ctx);
    if (left < 0) return kExitFailure;
    if (left == 0) {
      fprintf(progress, "drained: no streams left\n");
      return kExitOk;
    }
    if (left != last_reported) {
      fprintf(progress, "waiting: %lld stream%s left\n", static_cast<long long>(left), left == 1 ? "" : "s");
      fflush(progress);
      last_reported = left;
    }
    if (Clock::now() + kDrainPollInterval > deadline) {
      char waited[32];
      snprintf(waited, sizeof(waited), "%g", options.wait_timeout_seconds);
      print_error(std::to_string(left) + " stream" + (left == 1 ? "" : "s") + " still open after " + waited +
                  "s (--wait-timeout)");
      return kExitFailure;
    }
    std::this_thread::sleep_for(kDrainPollInterval);
  }
}

// Under --json: the answer as JSON, or as sent but escaped (terminal_text.h)
// if it is not JSON (docs/admin.md does not fix these answers' shape).
void print_answer_as_json(const HttpResponse& response) {
  std::string json_error;
  auto answer = parse_json(response.body, &json_error);
  std::string body = response.body;
  while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) body.pop_back();
  if (answer)
    printf("%s\n", to_json(*answer).c_str());
  else
    printf("%s\n", terminal_text(body).c_str());
  fflush(stdout);
}

}  // namespace

int run_ready(const CommandContext& ctx) {
  HttpRequest request;
  request.method = "GET";
  request.target = "/ready";
  HttpResponse response;
  std::string error;
  if (!ctx.admin.send(request, &response, &error)) {
    print_error(error);
    return kExitFailure;
  }
  std::string body = response.body;
  while (!body.empty() && (body.back() == '\n' || body.back() == '\r')) body.pop_back();
  if (response.status == 200) {
    printf("%s\n", body.empty() ? "ready" : terminal_text(body).c_str());
    return kExitOk;
  }
  // 503 says why (starting, draining); anything else is not rdmagw answering.
  if (response.status == 503)
    print_error(body.empty() ? "not ready" : body);
  else
    print_error(ctx.admin.describe_http_error(request, response));
  return kExitFailure;
}

int run_reload(const CommandContext& ctx) {
  HttpRequest request = post("/reload");
  HttpResponse response;
  std::string error;
  if (!ctx.admin.send(request, &response, &error)) {
    print_error(error);
    return kExitFailure;
  }
  // 200: applied; 400: refused with every error. Anything else is not the
  // reload endpoint answering.
  bool applied = response.status == 200, refused = response.status == 400;
  Json answer;
  if (!applied && !refused) {
    print_error(ctx.admin.describe_http_error(request, response));
    return kExitFailure;
  }
  if (!ctx.admin.parse_answer(request, response, &answer, &error)) {
    print_error(error);
    return kExitFailure;
  }
  if (ctx.json) {
    printf("%s\n", to_json(answer).c_str());
    return applied ? kExitOk : kExitFailure;
  }
  // The changes and errors quote the config file, which need not be ours.
  const Json shown = terminal_json(answer);
  if (applied) {
    const auto& changes = array_at(shown, "changes");
    std::string summary = changes.empty()
                              ? "no changes"
                              : std::to_string(changes.size()) + (changes.size() == 1 ? " change:" : " changes:");
    printf("reloaded: configuration generation %lld, %s\n", static_cast<long long>(int_or(shown, "generation")),
           summary.c_str());
    for (const auto& c : changes) printf("  %s\n", string_value(c).c_str());
    return kExitOk;
  }
  const auto& errors = array_at(shown, "errors");
  print_error("reload refused (the running configuration is kept): " + std::to_string(errors.size()) +
              (errors.size() == 1 ? " error" : " errors"));
  for (const auto& e : errors) fprintf(stderr, "%s\n", string_value(e).c_str());
  return kExitFailure;
}

namespace {

// POSTs to `target`: true on a 2xx answer; otherwise prints why (no answer,
// or the error the server sent: a 409 says why it would not) and false.
bool post_accepted(const CommandContext& ctx, const char* target, HttpResponse* response) {
  HttpRequest request = post(target);
  std::string error;
  if (!ctx.admin.send(request, response, &error)) {
    print_error(error);
    return false;
  }
  if (response->status < 200 || response->status > 299) {
    print_error(ctx.admin.describe_http_error(request, *response));
    return false;
  }
  return true;
}

}  // namespace

int run_drain(const CommandContext& ctx, const DrainOptions& options) {
  HttpResponse response;
  if (!post_accepted(ctx, "/drain", &response)) return kExitFailure;
  if (ctx.json) {
    print_answer_as_json(response);
  } else {
    printf("draining: rdmagw (admin at %s) accepts no new connections; open streams finish\n",
           ctx.admin.address().display().c_str());
  }
  if (options.wait) return wait_for_drain(ctx, options);
  if (!ctx.json) {
    int64_t left = active_streams(ctx);
    if (left < 0) return kExitFailure;
    printf("%lld stream%s still open\n", static_cast<long long>(left), left == 1 ? "" : "s");
  }
  return kExitOk;
}

int run_undrain(const CommandContext& ctx) {
  HttpResponse response;
  if (!post_accepted(ctx, "/undrain", &response)) return kExitFailure;  // the drain goes on
  if (ctx.json)
    print_answer_as_json(response);
  else
    printf("accepting: rdmagw (admin at %s) accepts new connections again\n", ctx.admin.address().display().c_str());
  return kExitOk;
}

}  // namespace rdmagw::ctl
