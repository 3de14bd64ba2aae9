// SPDX-License-Identifier: Apache-2.0
#pragma once
// A number drawn once per rdmagw process: the first half of the session
// tokens it dials with, so that a peer can tell a restarted rdmagw (whose
// old sessions cannot resume) from one whose transport merely failed. A
// process that took over from another carries on with that one's number:
// to the peers it is the same rdmagw.
#include <cstdint>

namespace rdmagw {

uint64_t process_instance();
// Before the workers start: the instance of the process taken over.
void inherit_process_instance(uint64_t instance);

}  // namespace rdmagw
