// SPDX-License-Identifier: Apache-2.0
#include "proxy/transport/rdma/rdma_limits.h"

#include <catch2/catch.hpp>

using namespace rdmagw;
using namespace rdmagw::transport;

TEST_CASE("the QP request stays within eRDMA's limits for any accepted configuration") {
  DeviceLimits dev;  // eRDMA-like
  for (uint32_t depth : {8u, 128u, 1024u, 8192u}) {
    for (uint32_t inl : {0u, 64u, 96u}) {
      RdmaConfig cfg;
      cfg.send_depth = depth;
      cfg.recv_depth = depth;
      cfg.inline_threshold = inl;
      ibv_qp_init_attr attr;
      std::string error;
      REQUIRE(make_qp_init_attr(cfg, dev, nullptr, &attr, &error));
      CHECK(attr.qp_type == IBV_QPT_RC);
      CHECK(attr.srq == nullptr);
      CHECK(attr.cap.max_recv_sge == 1);
      CHECK(attr.cap.max_send_sge <= 6);
      CHECK(attr.cap.max_inline_data <= 96);
      CHECK(attr.cap.max_send_wr <= 8192);
    }
  }
}

TEST_CASE("a device with tighter limits than eRDMA is respected") {
  DeviceLimits dev;
  dev.max_sge = 2;
  dev.max_qp_wr = 512;
  RdmaConfig cfg;
  cfg.send_depth = 256;
  cfg.recv_depth = 256;
  ibv_qp_init_attr attr;
  std::string error;
  REQUIRE(make_qp_init_attr(cfg, dev, nullptr, &attr, &error));
  CHECK(attr.cap.max_send_sge == 2);
}

TEST_CASE("a configuration beyond the device's limits is refused naming the key and the limit") {
  DeviceLimits dev;
  dev.max_qp_wr = 512;
  RdmaConfig cfg;
  cfg.send_depth = 1024;
  ibv_qp_init_attr attr;
  std::string error;
  CHECK_FALSE(make_qp_init_attr(cfg, dev, nullptr, &attr, &error));
  CHECK_THAT(error, Catch::Contains("tunnel.rdma.send_depth 1024") && Catch::Contains("512"));
  cfg.send_depth = 256;
  cfg.recv_depth = 600;
  CHECK_FALSE(make_qp_init_attr(cfg, dev, nullptr, &attr, &error));
  CHECK_THAT(error, Catch::Contains("tunnel.rdma.recv_depth 600"));
  dev.max_qp_wr = 8192;
  dev.max_cqe = 300;
  cfg.recv_depth = 128;
  CHECK_FALSE(make_qp_init_attr(cfg, dev, nullptr, &attr, &error));
  CHECK_THAT(error, Catch::Contains("completion queue"));
}

TEST_CASE("the RDMA sources use none of the verbs eRDMA lacks") {
  // Reads the transport's sources: SRQ, UD and the extended ibv_wr_* API
  // must not appear outside comments.
  for (const char* path : {RDMAGW_SOURCE_DIR "/proxy/transport/rdma/rdma_transport.cc",
                           RDMAGW_SOURCE_DIR "/proxy/transport/rdma/rdma_context.cc",
                           RDMAGW_SOURCE_DIR "/proxy/transport/rdma/rdma_listener.cc"}) {
    FILE* f = fopen(path, "r");
    REQUIRE(f != nullptr);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
      ++n;
      std::string s(line);
      auto comment = s.find("//");
      if (comment != std::string::npos) s = s.substr(0, comment);
      INFO(path << ":" << n << ": " << line);
      CHECK(s.find("ibv_create_srq") == std::string::npos);
      CHECK(s.find("IBV_QPT_UD") == std::string::npos);
      CHECK(s.find("ibv_wr_") == std::string::npos);
      CHECK(s.find("ibv_qp_ex") == std::string::npos);
      CHECK(s.find("IBV_WR_SEND_WITH_IMM") == std::string::npos);
    }
    fclose(f);
  }
}
