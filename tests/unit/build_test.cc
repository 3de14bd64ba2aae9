// SPDX-License-Identifier: Apache-2.0
// The build the tests run is built like what they test: assert() is in
// (RDMAGW_ASSERTIONS, CMakeLists.txt), not compiled out by -DNDEBUG.
#include <catch2/catch.hpp>

TEST_CASE("assert() is compiled in") {
#ifdef NDEBUG
  FAIL(
      "NDEBUG is defined: every assert() is compiled out of what the tests test "
      "(configured with RDMAGW_ASSERTIONS=OFF, or -DNDEBUG in CMAKE_CXX_FLAGS?)");
#else
  SUCCEED();
#endif
}
