#pragma once
// A number drawn once per rdmagw process: the first half of the session
// tokens it dials with, so that a peer can tell a restarted rdmagw (whose
// old sessions cannot resume) from one whose transport merely failed.
#include <cstdint>

namespace rdmagw {

uint64_t process_instance();

}  // namespace rdmagw
