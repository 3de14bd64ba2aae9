// SPDX-License-Identifier: Apache-2.0
// AdminServer over real HTTP: a server on 127.0.0.1, an ephemeral port, a
// fake Backend, and requests written by hand on a plain socket, so that what
// is checked is exactly what goes over the wire.
#include "proxy/admin/admin_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "common/address.h"
#include "common/unique_fd.h"
#include "proxy/admin/admin_routes.h"
#include "proxy/admin/stats_page.h"

using namespace rdmagw;
using namespace rdmagw::admin;

namespace {

// A Backend whose answers the test sets. Called from the admin thread, so
// everything it hands out is guarded.
class FakeBackend : public Backend {
 public:
  Status status() override {
    std::lock_guard lock(mu_);
    return status_;
  }
  std::shared_ptr<const Config> config() override {
    auto config = std::make_shared<Config>();
    config->node = "host-a";
    return config;
  }
  std::vector<const metrics::WorkerMetrics*> worker_metrics() override { return {&worker_}; }
  const metrics::ProcessMetrics& process_metrics() override { return process_; }
  bool peers(std::vector<PeerInfo>* out, std::string* error) override {
    std::lock_guard lock(mu_);
    if (!workers_answer_) {
      *error = "worker 1 did not answer within 1000 ms";
      return false;
    }
    out->push_back(PeerInfo{.name = "b", .configured = true, .state = "up"});
    return true;
  }
  bool streams(std::vector<StreamInfo>* out, std::string* error) override {
    std::lock_guard lock(mu_);
    if (!workers_answer_) {
      *error = "worker 1 did not answer within 1000 ms";
      return false;
    }
    ++streams_calls_;
    for (uint32_t id = 1; id <= 3; ++id) out->push_back(StreamInfo{.side = "client", .stream_id = id, .state = "open"});
    return true;
  }
  bool services(ServicesReport* out, std::string* error) override {
    std::lock_guard lock(mu_);
    if (!workers_answer_) {
      *error = "worker 1 did not answer within 1000 ms";
      return false;
    }
    out->status.file = "/run/rdmagw/services.json";
    return true;
  }
  ReloadResult reload() override {
    std::lock_guard lock(mu_);
    ReloadResult result = reload_;
    if (result.ok) result.generation = ++status_.config_generation;
    return result;
  }
  uint64_t drain() override {
    std::lock_guard lock(mu_);
    status_.ready = false;
    status_.draining = true;
    status_.not_ready_reason = "draining";
    return 2;
  }
  bool undrain(std::string* error) override {
    std::lock_guard lock(mu_);
    if (!undrain_error_.empty()) {
      *error = undrain_error_;
      return false;
    }
    status_.ready = true;
    status_.draining = false;
    status_.not_ready_reason.clear();
    return true;
  }
  void refuse_undrain(std::string why) {
    std::lock_guard lock(mu_);
    undrain_error_ = std::move(why);
  }

  void set_ready(bool ready, std::string reason) {
    std::lock_guard lock(mu_);
    status_.ready = ready;
    status_.not_ready_reason = std::move(reason);
  }
  void set_workers_answer(bool answer) {
    std::lock_guard lock(mu_);
    workers_answer_ = answer;
  }
  void set_reload(ReloadResult result) {
    std::lock_guard lock(mu_);
    reload_ = std::move(result);
  }
  int streams_calls() {
    std::lock_guard lock(mu_);
    return streams_calls_;
  }

 private:
  std::mutex mu_;
  Status status_{.node = "host-a", .config_generation = 1};
  bool workers_answer_ = true;
  int streams_calls_ = 0;
  ReloadResult reload_;
  std::string undrain_error_;
  metrics::WorkerMetrics worker_;
  metrics::ProcessMetrics process_;
};

Endpoint loopback(uint16_t port) {
  std::string error;
  auto ep = make_tcp_endpoint("127.0.0.1", port, &error);
  REQUIRE(ep);
  return *ep;
}

UniqueFd connect_to(uint16_t port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  timeval timeout{5, 0};  // a hung server fails the test instead of hanging it
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  Endpoint ep = loopback(port);
  REQUIRE(connect(fd.get(), reinterpret_cast<const sockaddr*>(&ep.addr), ep.addr_len) == 0);
  return fd;
}

struct HttpAnswer {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

// One request on a new connection ("Connection: close"), read to EOF.
HttpAnswer http(uint16_t port, const std::string& method, const std::string& target) {
  UniqueFd fd = connect_to(port);
  std::string request = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (method == "POST") request += "Content-Length: 0\r\n";
  request += "\r\n";
  REQUIRE(send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd.get(), buf, sizeof(buf), 0)) > 0) raw.append(buf, static_cast<size_t>(n));
  INFO(method << " " << target << " answered:\n" << raw);
  REQUIRE(n == 0);  // EOF, not a timeout

  HttpAnswer answer;
  size_t head_end = raw.find("\r\n\r\n");
  REQUIRE(head_end != std::string::npos);
  REQUIRE(raw.rfind("HTTP/1.1 ", 0) == 0);
  answer.status = std::stoi(raw.substr(9, 3));
  size_t line_start = raw.find("\r\n") + 2;
  while (line_start < head_end) {
    size_t line_end = raw.find("\r\n", line_start);
    std::string line = raw.substr(line_start, line_end - line_start);
    size_t colon = line.find(':');
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    answer.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
    line_start = line_end + 2;
  }
  answer.body = raw.substr(head_end + 4);
  // A HEAD answer announces the length of the body it leaves out.
  if (method != "HEAD") CHECK(answer.headers["content-length"] == std::to_string(answer.body.size()));
  return answer;
}

struct RunningServer {
  FakeBackend backend;
  AdminServer server{backend};
  RunningServer() {
    std::string error;
    INFO(error);
    REQUIRE(server.start(loopback(0), &error));
    REQUIRE(server.port() != 0);
  }
  uint16_t port() const { return server.port(); }
};

}  // namespace

TEST_CASE("admin server: /live and /ready", "[admin][server]") {
  RunningServer s;
  HttpAnswer live = http(s.port(), "GET", "/live");
  CHECK(live.status == 200);
  CHECK(live.body == "live\n");
  CHECK(live.headers["content-type"] == "text/plain; charset=utf-8");

  s.backend.set_ready(false, "starting");
  HttpAnswer starting = http(s.port(), "GET", "/ready");
  CHECK(starting.status == 503);
  CHECK(starting.body == "not ready: starting\n");

  s.backend.set_ready(true, "");
  HttpAnswer ready = http(s.port(), "GET", "/ready");
  CHECK(ready.status == 200);
  CHECK(ready.body == "ready\n");
}

TEST_CASE("admin server: unknown path is 404 with the list of endpoints", "[admin][server]") {
  RunningServer s;
  for (const char* path : {"/nope", "/stats/", "//", "/index.html", "/live/x"}) {
    HttpAnswer a = http(s.port(), "GET", path);
    INFO(path);
    CHECK(a.status == 404);
    for (const char* endpoint : {"GET /\n", "GET /live", "GET /ready", "GET /stats", "GET /metrics", "GET /peers",
                                 "GET /streams", "GET /config", "POST /reload", "POST /drain", "POST /undrain"})
      CHECK_THAT(a.body, Catch::Contains(endpoint));
  }
}

TEST_CASE("admin server: wrong method is 405 with Allow", "[admin][server]") {
  RunningServer s;
  HttpAnswer get_reload = http(s.port(), "GET", "/reload");
  CHECK(get_reload.status == 405);
  CHECK(get_reload.headers["allow"] == "POST");
  HttpAnswer post_stats = http(s.port(), "POST", "/stats");
  CHECK(post_stats.status == 405);
  CHECK(post_stats.headers["allow"] == "GET, HEAD");
  HttpAnswer post_page = http(s.port(), "POST", "/");
  CHECK(post_page.status == 405);
  CHECK(post_page.headers["allow"] == "GET, HEAD");
  HttpAnswer put_drain = http(s.port(), "PUT", "/drain");
  CHECK(put_drain.status == 405);
  CHECK(put_drain.headers["allow"] == "POST");
  HttpAnswer delete_live = http(s.port(), "DELETE", "/live");
  CHECK(delete_live.status == 405);
  CHECK(delete_live.headers["allow"] == "GET, HEAD");
}

TEST_CASE("admin server: HEAD answers as GET does, without the body", "[admin][server]") {
  RunningServer s;
  const std::string stats_length = std::to_string(http(s.port(), "GET", "/stats").body.size());
  HttpAnswer head_stats = http(s.port(), "HEAD", "/stats");
  CHECK(head_stats.status == 200);
  CHECK(head_stats.headers["content-type"] == "application/json");
  CHECK(head_stats.headers["content-length"] == stats_length);
  CHECK(head_stats.body.empty());
  HttpAnswer head_ready = http(s.port(), "HEAD", "/ready");
  CHECK(head_ready.status == 503);  // the fake backend is not ready
  CHECK(head_ready.body.empty());
  HttpAnswer head_reload = http(s.port(), "HEAD", "/reload");
  CHECK(head_reload.status == 405);
  CHECK(head_reload.headers["allow"] == "POST");
}

TEST_CASE("admin server: GET / is the stats page, HTML that no cache keeps", "[admin][server][page]") {
  RunningServer s;
  HttpAnswer page = http(s.port(), "GET", "/");
  CHECK(page.status == 200);
  CHECK(page.headers["content-type"] == "text/html; charset=utf-8");
  CHECK(page.headers["cache-control"] == "no-store");
  CHECK(page.headers["x-content-type-options"] == "nosniff");
  // Nothing from elsewhere, data only from the admin endpoint itself.
  CHECK_THAT(page.headers["content-security-policy"], Catch::StartsWith("default-src 'none';"));
  CHECK_THAT(page.headers["content-security-policy"], Catch::Contains("connect-src 'self';"));
  CHECK(page.body == stats_page_html());
  CHECK_THAT(page.body, Catch::StartsWith("<!DOCTYPE html>"));
  // The query is the page's own (interval=, streams=): the same page.
  CHECK(http(s.port(), "GET", "/?interval=0.5").body == stats_page_html());

  HttpAnswer head = http(s.port(), "HEAD", "/");
  CHECK(head.status == 200);
  CHECK(head.headers["content-type"] == "text/html; charset=utf-8");
  CHECK(head.headers["content-length"] == std::to_string(stats_page_html().size()));
  CHECK(head.body.empty());
  // The policy belongs to the page; JSON answers carry none.
  CHECK(http(s.port(), "GET", "/stats").headers.count("content-security-policy") == 0);
}

TEST_CASE("admin server: POST /reload answers 400 with the errors, 200 with the changes", "[admin][server]") {
  RunningServer s;
  s.backend.set_reload(ReloadResult{.ok = false, .errors = {"rdmagw.yaml:7:13: listeners[1].listen: bad", "two"}});
  HttpAnswer bad = http(s.port(), "POST", "/reload");
  CHECK(bad.status == 400);
  CHECK(bad.headers["content-type"] == "application/json");
  CHECK(bad.body == R"({"ok":false,"errors":["rdmagw.yaml:7:13: listeners[1].listen: bad","two"]})");

  s.backend.set_reload(ReloadResult{.ok = true, .changes = {"listener web added"}});
  HttpAnswer good = http(s.port(), "POST", "/reload");
  CHECK(good.status == 200);
  CHECK(good.body == R"({"ok":true,"generation":2,"changes":["listener web added"]})");
}

TEST_CASE("admin server: POST /drain turns /ready to 503", "[admin][server]") {
  RunningServer s;
  s.backend.set_ready(true, "");
  HttpAnswer drain = http(s.port(), "POST", "/drain");
  CHECK(drain.status == 200);
  CHECK(drain.body == R"({"ok":true,"draining":true,"streams_open":2})");
  HttpAnswer ready = http(s.port(), "GET", "/ready");
  CHECK(ready.status == 503);
  CHECK(ready.body == "not ready: draining\n");
}

TEST_CASE("admin server: POST /undrain turns /ready to 200, or says why not", "[admin][server]") {
  RunningServer s;
  CHECK(http(s.port(), "POST", "/drain").status == 200);
  s.backend.refuse_undrain("listeners[0].listen: bind: Address already in use; still draining");
  HttpAnswer refused = http(s.port(), "POST", "/undrain");
  CHECK(refused.status == 409);
  CHECK(refused.body == R"({"error":"listeners[0].listen: bind: Address already in use; still draining"})");
  CHECK(http(s.port(), "GET", "/ready").status == 503);
  s.backend.refuse_undrain("");
  HttpAnswer undrain = http(s.port(), "POST", "/undrain");
  CHECK(undrain.status == 200);
  CHECK(undrain.body == R"({"ok":true,"draining":false})");
  CHECK(http(s.port(), "GET", "/ready").status == 200);
  CHECK(http(s.port(), "GET", "/undrain").status == 405);
}

TEST_CASE("admin server: /streams paging and bad parameters", "[admin][server]") {
  RunningServer s;
  HttpAnswer all = http(s.port(), "GET", "/streams");
  CHECK(all.status == 200);
  CHECK(all.headers["content-type"] == "application/json");
  CHECK_THAT(all.body, Catch::StartsWith(R"({"total":3,"offset":0,"limit":100,"streams":[)"));

  HttpAnswer page = http(s.port(), "GET", "/streams?offset=1&limit=1");
  CHECK(page.status == 200);
  CHECK_THAT(page.body, Catch::StartsWith(R"({"total":3,"offset":1,"limit":1,"streams":[)"));
  CHECK_THAT(page.body, Catch::Contains(R"("stream_id":2)"));
  CHECK_THAT(page.body, !Catch::Contains(R"("stream_id":3)"));

  const int calls = s.backend.streams_calls();
  for (const char* query : {"limit=abc", "limit=", "limit=-1", "limit=10001", "limit=+5", "offset=1x", "offset=%31",
                            "offset=99999999999999999999999", "limit"}) {
    HttpAnswer bad = http(s.port(), "GET", std::string("/streams?") + query);
    INFO(query);
    CHECK(bad.status == 400);
    CHECK(bad.headers["content-type"] == "application/json");
    CHECK_THAT(bad.body, Catch::StartsWith(R"({"error":")"));
  }
  CHECK(s.backend.streams_calls() == calls);  // refused before asking the workers
  CHECK_THAT(http(s.port(), "GET", "/streams?limit=abc").body,
             Catch::Contains("limit: must be an integer from 0 to 10000"));
  CHECK(http(s.port(), "GET", "/streams?limit=10000&other=x").status == 200);
}

TEST_CASE("admin server: 503 when a worker does not answer", "[admin][server]") {
  RunningServer s;
  CHECK(http(s.port(), "GET", "/peers").status == 200);
  s.backend.set_workers_answer(false);
  for (const char* path : {"/peers", "/streams"}) {
    HttpAnswer a = http(s.port(), "GET", path);
    INFO(path);
    CHECK(a.status == 503);
    CHECK(a.body == R"({"error":"worker 1 did not answer within 1000 ms"})");
  }
}

TEST_CASE("admin server: content types of /stats, /metrics, /config", "[admin][server]") {
  RunningServer s;
  HttpAnswer stats = http(s.port(), "GET", "/stats");
  CHECK(stats.status == 200);
  CHECK(stats.headers["content-type"] == "application/json");
  CHECK_THAT(stats.body, Catch::StartsWith(R"({"version":)"));
  HttpAnswer metrics = http(s.port(), "GET", "/metrics");
  CHECK(metrics.status == 200);
  CHECK(metrics.headers["content-type"] == "text/plain; version=0.0.4");
  CHECK_THAT(metrics.body, Catch::Contains("# TYPE rdmagw_ready gauge\nrdmagw_ready 0\n"));
  HttpAnswer config = http(s.port(), "GET", "/config");
  CHECK(config.status == 200);
  CHECK(config.headers["content-type"] == "application/json");
  CHECK_THAT(config.body, Catch::StartsWith(R"({"node":"host-a",)"));
  CHECK_THAT(config.body, Catch::EndsWith(R"("generation":1})"));
}

TEST_CASE("admin server: a taken port fails start() with the reason", "[admin][server]") {
  RunningServer first;
  FakeBackend backend;
  AdminServer second(backend);
  std::string error;
  CHECK_FALSE(second.start(loopback(first.port()), &error));
  CHECK(error == "bind 127.0.0.1:" + std::to_string(first.port()) + ": Address already in use");
  CHECK(second.port() == 0);
  second.stop();  // nothing to stop: harmless
  CHECK(http(first.port(), "GET", "/live").status == 200);

  std::string unix_error;
  std::string parse_error;
  auto unix_address = parse_endpoint("unix:/tmp/admin.sock", &parse_error);
  REQUIRE(unix_address);
  CHECK_FALSE(second.start(*unix_address, &unix_error));
  CHECK_THAT(unix_error, Catch::Contains("IP:PORT"));
}

TEST_CASE("admin server: stop() is prompt, repeatable, and closes idle connections", "[admin][server]") {
  FakeBackend backend;
  // Start and stop at once, many times: a stop that races the thread's
  // first loop turn must not be lost.
  for (int i = 0; i < 20; ++i) {
    AdminServer server(backend);
    std::string error;
    REQUIRE(server.start(loopback(0), &error));
    server.stop();
    CHECK(server.port() == 0);
  }

  AdminServer server(backend);
  std::string error;
  REQUIRE(server.start(loopback(0), &error));
  uint16_t port = server.port();
  CHECK_FALSE(server.start(loopback(0), &error));  // once only
  UniqueFd idle = connect_to(port);                // connected, never sends
  CHECK(http(port, "GET", "/live").status == 200);
  auto before = std::chrono::steady_clock::now();
  server.stop();
  CHECK(std::chrono::steady_clock::now() - before < std::chrono::seconds(2));
  char byte;
  CHECK(recv(idle.get(), &byte, 1, 0) <= 0);  // closed by the server (EOF or reset)
  server.stop();
  // The port is free again.
  AdminServer again(backend);
  REQUIRE(again.start(loopback(port), &error));
}

// The table at the top of docs/admin.md and the routes the server answers
// (the 404 answer lists them) are the same set: an endpoint added to one
// fails this until it is in the other.
TEST_CASE("admin routes: docs/admin.md's endpoint table is exactly what the server answers", "[admin][docs]") {
  std::ifstream doc(std::string(RDMAGW_SOURCE_DIR) + "/docs/admin.md");
  REQUIRE(doc);
  std::vector<std::string> documented;
  std::string line;
  while (std::getline(doc, line)) {
    // "| GET | `/streams?offset=N&limit=M` | ..."
    for (const char* method : {"GET", "POST"}) {
      std::string head = "| " + std::string(method) + " | `";
      if (line.rfind(head, 0) != 0) continue;
      std::string path = line.substr(head.size(), line.find('`', head.size()) - head.size());
      documented.push_back(std::string(method) + " " + path.substr(0, path.find('?')));
    }
  }
  FakeBackend backend;
  Response answer = handle_request(backend, "GET", "/no-such-endpoint", "");
  REQUIRE(answer.status == 404);
  std::vector<std::string> served;
  std::istringstream listed(answer.body);
  while (std::getline(listed, line))
    if (line.rfind("  ", 0) == 0) served.push_back(line.substr(2));
  REQUIRE_FALSE(served.empty());
  std::sort(documented.begin(), documented.end());
  std::sort(served.begin(), served.end());
  CHECK(documented == served);
}
