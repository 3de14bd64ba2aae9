// SPDX-License-Identifier: Apache-2.0
// local_legs.cgroup: pod, step by step on texts and on a directory tree made
// to look like a cgroup v2 hierarchy (cgroup.procs files); the real one,
// with the programs attached there, is in tests/integration/test_local_legs.py.
#include "proxy/local/cgroup_locator.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace rdmagw::local;
namespace fs = std::filesystem;

namespace {

struct FakeHierarchy {
  fs::path root;
  FakeHierarchy() {
    char name[] = "/tmp/rdmagw-cgroup-test-XXXXXX";
    root = ::mkdtemp(name);
    procs("", "1\n2\n");
  }
  ~FakeHierarchy() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  void procs(const std::string& dir, const std::string& text) {
    fs::create_directories(root / dir);
    std::ofstream(root / dir / "cgroup.procs") << text;
  }
  std::string at(const std::string& dir) const { return (root / dir).lexically_normal().string(); }
};

}  // namespace

TEST_CASE("cgroup locator: the unified line of /proc/PID/cgroup, the first cgroup2 mount of mountinfo") {
  CHECK(unified_cgroup_path("12:memory:/x\n0::/kubepods/pod1/ctr\n") == "/kubepods/pod1/ctr");
  CHECK(unified_cgroup_path("0::/\n") == "/");
  CHECK_FALSE(unified_cgroup_path("4:memory:/a\n1:cpu:/a\n").has_value());
  const char* mountinfo =
      "96 87 0:47 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755\n"
      "97 96 0:29 /libpod /sys/fs/cgroup/cpu ro shared:5 - cgroup cgroup rw,cpu\n"
      "88 84 0:38 / /host/sys\\040fs/cgroup ro,relatime shared:9 master:2 - cgroup2 cgroup2 rw,nsdelegate\n"
      "89 84 0:39 / /other cgroup2 ro - cgroup2 cgroup2 rw\n";
  CHECK(first_cgroup2_mount(mountinfo) == "/host/sys fs/cgroup");
  CHECK_FALSE(first_cgroup2_mount("96 87 0:47 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n").has_value());
  CHECK_FALSE(first_cgroup2_mount("garbage\n\n - cgroup2\n").has_value());
}

TEST_CASE("cgroup locator: a process's cgroup by its path, or by a walk where a namespace hides the path") {
  FakeHierarchy h;
  h.procs("kubepods/burstable/pod-u1/ctr-app", "40\n41\n");
  h.procs("kubepods/burstable/pod-u1/ctr-rdmagw", "400\n7\n");
  h.procs("kubepods/burstable/pod-u2/ctr-other", "77\n");
  std::string why;
  // No cgroup namespace: /proc/self/cgroup's path is the path under the mount.
  CHECK(find_process_cgroup(h.root.string(), "/kubepods/burstable/pod-u1/ctr-rdmagw", 400, &why) ==
        h.at("kubepods/burstable/pod-u1/ctr-rdmagw"));
  // A container's namespace: it says "/", and the walk finds it ("7" is not "77").
  CHECK(find_process_cgroup(h.root.string(), "/", 7, &why) == h.at("kubepods/burstable/pod-u1/ctr-rdmagw"));
  CHECK(find_process_cgroup(h.root.string(), "/", 77, &why) == h.at("kubepods/burstable/pod-u2/ctr-other"));
  CHECK_FALSE(find_process_cgroup(h.root.string(), "/", 4, &why).has_value());
  CHECK(why.find("lists this process (pid 4)") != std::string::npos);
  CHECK(why.find("local_legs.cgroup_fs") != std::string::npos);
}

TEST_CASE("cgroup locator: the pod is the parent, never the hierarchy's root") {
  FakeHierarchy h;
  std::string why;
  CHECK(pod_cgroup_of(h.root.string(), h.at("kubepods/pod-u1/ctr"), &why) == h.at("kubepods/pod-u1"));
  CHECK(pod_cgroup_of(h.root.string() + "/", h.at("kubepods/pod-u1/ctr") + "/", &why) == h.at("kubepods/pod-u1"));
  CHECK_FALSE(pod_cgroup_of(h.root.string(), h.at("system.slice"), &why).has_value());
  CHECK(why.find("is the root of the hierarchy") != std::string::npos);
  CHECK_FALSE(pod_cgroup_of(h.root.string(), h.root.string(), &why).has_value());
  CHECK(why.find("has no parent") != std::string::npos);
}

TEST_CASE("cgroup locator: an absolute cgroup is taken as it is") {
  std::string why;
  CHECK(locate_legs_cgroup("/sys/fs/cgroup/app.slice", "", &why) == "/sys/fs/cgroup/app.slice");
}
