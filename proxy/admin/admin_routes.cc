// SPDX-License-Identifier: Apache-2.0
#include "proxy/admin/admin_routes.h"

#include <charconv>
#include <cstdint>
#include <exception>
#include <optional>

#include "proxy/admin/admin_render.h"
#include "proxy/admin/stats_page.h"

namespace rdmagw::admin {
namespace {

Response json_response(int status, std::string body) {
  return Response{status, std::string(kJsonContentType), std::move(body), {}};
}

Response text_response(int status, std::string body) {
  return Response{status, std::string(kTextContentType), std::move(body), {}};
}

// The raw value of the first `name=value` pair of a query string, or
// nullopt if there is none. Values are not percent-decoded: the only
// parameters are decimal numbers, for which an escape is an error anyway.
std::optional<std::string_view> query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    size_t end = query.find('&');
    std::string_view pair = query.substr(0, end);
    query = end == std::string_view::npos ? std::string_view() : query.substr(end + 1);
    size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    return eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
  }
  return std::nullopt;
}

// Reads parameter `name` as a decimal integer 0..max (`fallback` when
// absent). On a bad value returns false with *error saying why.
bool count_param(std::string_view query, std::string_view name, size_t fallback, size_t max, size_t* out,
                 std::string* error) {
  auto text = query_param(query, name);
  if (!text) {
    *out = fallback;
    return true;
  }
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (text->empty() || ec != std::errc() || end != text->data() + text->size() || value > max) {
    *error = std::string(name) + ": must be an integer from 0 to " + std::to_string(max) + ", got '" +
             std::string(*text) + "'";
    return false;
  }
  *out = static_cast<size_t>(value);
  return true;
}

// The page draws only what its own origin answers: nothing loads from
// elsewhere (it must work offline, and a name or target that slipped past
// escaping could not send anything away), and no other site may frame it.
constexpr std::string_view kStatsPageHeaders =
    "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n"
    "X-Content-Type-Options: nosniff\r\n"
    "Referrer-Policy: no-referrer\r\n";

Response get_stats_page(Backend&, std::string_view) {
  Response response{200, std::string(kHtmlContentType), std::string(stats_page_html()), {}};
  response.headers = kStatsPageHeaders;
  return response;
}

Response get_live(Backend&, std::string_view) { return text_response(200, "live\n"); }

Response get_ready(Backend& backend, std::string_view) {
  Status status = backend.status();
  if (status.ready) return text_response(200, "ready\n");
  std::string reason = status.not_ready_reason.empty() ? "not ready" : "not ready: " + status.not_ready_reason;
  return text_response(503, reason + "\n");
}

Response get_stats(Backend& backend, std::string_view) {
  Status status = backend.status();
  std::shared_ptr<const Config> config = backend.config();
  return json_response(200,
                       render_stats_json(status, config.get(), backend.worker_metrics(), backend.process_metrics()));
}

Response get_metrics(Backend& backend, std::string_view) {
  Status status = backend.status();
  status.self = read_process_self();
  std::shared_ptr<const Config> config = backend.config();
  return Response{200,
                  std::string(kMetricsContentType),
                  render_metrics_text(status, config.get(), backend.worker_metrics(), backend.process_metrics()),
                  {}};
}

Response get_peers(Backend& backend, std::string_view) {
  std::vector<PeerInfo> peers;
  std::string error;
  if (!backend.peers(&peers, &error)) return json_response(503, render_error_json(error));
  return json_response(200, render_peers_json(peers));
}

Response get_streams(Backend& backend, std::string_view query) {
  size_t offset = 0, limit = 0;
  std::string error;
  // Checked before asking the workers: a bad request costs them nothing.
  if (!count_param(query, "offset", 0, SIZE_MAX, &offset, &error) ||
      !count_param(query, "limit", kDefaultStreamsLimit, kMaxStreamsLimit, &limit, &error))
    return json_response(400, render_error_json(error));
  std::vector<StreamInfo> streams;
  if (!backend.streams(&streams, &error)) return json_response(503, render_error_json(error));
  return json_response(200, render_streams_json(streams, offset, limit));
}

Response get_services(Backend& backend, std::string_view) {
  ServicesReport report;
  std::string error;
  if (!backend.services(&report, &error)) return json_response(503, render_error_json(error));
  return json_response(200, render_services_json(report));
}

Response get_config(Backend& backend, std::string_view) {
  Status status = backend.status();
  std::shared_ptr<const Config> config = backend.config();
  if (!config) return json_response(503, render_error_json("no configuration loaded yet"));
  return json_response(200, render_config_json(*config, status.config_generation));
}

Response post_reload(Backend& backend, std::string_view) {
  ReloadResult result = backend.reload();
  if (!result.ok) return json_response(400, render_reload_json(result, 0));
  return json_response(200, render_reload_json(result, result.generation));
}

Response post_drain(Backend& backend, std::string_view) {
  return json_response(200, render_drain_json(backend.drain()));
}

Response post_undrain(Backend& backend, std::string_view) {
  std::string error;
  if (!backend.undrain(&error)) return json_response(409, render_error_json(error));
  return json_response(200, render_undrain_json());
}

struct Route {
  std::string_view method;
  std::string_view path;
  Response (*handler)(Backend&, std::string_view query);
};

// docs/admin.md's table, in its order (the 404 answer lists it).
constexpr Route kRoutes[] = {
    {"GET", "/", get_stats_page},     {"GET", "/live", get_live},         {"GET", "/ready", get_ready},
    {"GET", "/stats", get_stats},     {"GET", "/metrics", get_metrics},   {"GET", "/peers", get_peers},
    {"GET", "/streams", get_streams}, {"GET", "/services", get_services}, {"GET", "/config", get_config},
    {"POST", "/reload", post_reload}, {"POST", "/drain", post_drain},     {"POST", "/undrain", post_undrain},
};

Response not_found(std::string_view path) {
  std::string body = "no such endpoint: " + std::string(path) + "\nendpoints:\n";
  for (const Route& r : kRoutes) body += "  " + std::string(r.method) + " " + std::string(r.path) + "\n";
  return text_response(404, std::move(body));
}

// HEAD is GET without the body (RFC 9110, 9.3.2), on every GET route.
bool method_matches(std::string_view route_method, std::string_view method) {
  return route_method == method || (route_method == "GET" && method == "HEAD");
}

Response method_not_allowed(std::string_view method, std::string_view path) {
  std::string allow;
  for (const Route& r : kRoutes) {
    if (r.path != path) continue;
    if (!allow.empty()) allow += ", ";
    allow += r.method;
    if (r.method == "GET") allow += ", HEAD";
  }
  Response response = text_response(
      405, "method " + std::string(method) + " not allowed on " + std::string(path) + "; use " + allow + "\n");
  response.allow = std::move(allow);
  return response;
}

}  // namespace

Response handle_request(Backend& backend, std::string_view method, std::string_view path, std::string_view query) {
  bool path_known = false;
  for (const Route& r : kRoutes) {
    if (r.path != path) continue;
    path_known = true;
    if (!method_matches(r.method, method)) continue;
    // The admin thread is a C callback of libevent: nothing may unwind
    // through it, and one failed answer must not end the process.
    try {
      return r.handler(backend, query);
    } catch (const std::exception& e) {
      return json_response(500, render_error_json(std::string("internal error: ") + e.what()));
    } catch (...) {
      return json_response(500, render_error_json("internal error"));
    }
  }
  return path_known ? method_not_allowed(method, path) : not_found(path);
}

}  // namespace rdmagw::admin
