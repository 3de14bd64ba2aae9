// SPDX-License-Identifier: Apache-2.0
// Run-time defaults of the sanitizers, compiled into every executable of an
// RDMAGW_SANITIZE build (CMakeLists.txt), so that ctest, the integration
// tests and a hand-run build-asan/bin/rdmagw behave alike.  ASAN_OPTIONS,
// UBSAN_OPTIONS and LSAN_OPTIONS in the environment still override them.
//
// Every report stops the process with exit code 23 (rdmagw and rdmagwctl
// exit 0, 1 or 2), after a stack trace on stderr; the integration tests fail
// a test on either (tests/integration/conftest.py).

#ifndef RDMAGW_SOURCE_DIR
#error "RDMAGW_SOURCE_DIR names the source tree (CMakeLists.txt defines it)"
#endif

#define RDMAGW_SANITIZER_DEFAULT(name, options) \
  extern "C" __attribute__((visibility("default"), used, no_sanitize_address)) const char* name() { return options; }

RDMAGW_SANITIZER_DEFAULT(__asan_default_options,
                         "halt_on_error=1:exitcode=23:detect_leaks=1:"
                         "detect_stack_use_after_return=1:check_initialization_order=1:"
                         "strict_init_order=1:print_summary=1")
RDMAGW_SANITIZER_DEFAULT(__ubsan_default_options, "halt_on_error=1:exitcode=23:print_stacktrace=1:print_summary=1")
// ThreadSanitizer (the RDMAGW_TSAN build): the same exit code; the history
// is deepened so that both sides of a race keep their stacks.
RDMAGW_SANITIZER_DEFAULT(__tsan_default_options,
                         "halt_on_error=1:exitcode=23:history_size=4:second_deadlock_stack=1:print_summary=1")
// Leaks inside third-party libraries, one line each with the reason.
RDMAGW_SANITIZER_DEFAULT(__lsan_default_options,
                         "exitcode=23:print_suppressions=0:"
                         "suppressions=" RDMAGW_SOURCE_DIR "/tests/sanitizers/lsan.supp")
