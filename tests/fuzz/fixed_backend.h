// SPDX-License-Identifier: Apache-2.0
#pragma once
// The admin harnesses' backend: fixed answers, so that the router and the
// HTTP parser are what the fuzzer explores.
#include <memory>
#include <string>
#include <vector>

#include "proxy/admin/admin_routes.h"

namespace rdmagw::admin {

class FixedBackend : public Backend {
 public:
  FixedBackend() {
    auto c = std::make_shared<Config>();
    c->node = "fuzz";
    config_ = c;
  }
  Status status() override {
    Status s;
    s.node = "fuzz";
    s.ready = true;
    return s;
  }
  std::shared_ptr<const Config> config() override { return config_; }
  std::vector<const metrics::WorkerMetrics*> worker_metrics() override { return {&worker_}; }
  const metrics::ProcessMetrics& process_metrics() override { return process_; }
  bool peers(std::vector<PeerInfo>* out, std::string*) override {
    out->push_back(PeerInfo{.name = "b", .configured = true, .state = "up"});
    return true;
  }
  bool streams(std::vector<StreamInfo>* out, std::string*) override {
    for (uint32_t id = 1; id <= 3; ++id) out->push_back(StreamInfo{.side = "client", .stream_id = id, .state = "open"});
    return true;
  }
  bool services(ServicesReport* out, std::string*) override {
    out->status.file = "/run/rdmagw/services.json";
    return true;
  }
  ReloadResult reload() override { return ReloadResult{}; }
  uint64_t drain() override { return 0; }
  bool undrain(std::string*) override { return true; }

 private:
  std::shared_ptr<const Config> config_;
  metrics::WorkerMetrics worker_;
  metrics::ProcessMetrics process_;
};

}  // namespace rdmagw::admin
