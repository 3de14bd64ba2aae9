// SPDX-License-Identifier: Apache-2.0
#pragma once
// Which worker holds each resumable session peers dialed to this process.
// A peer's new connection lands on whichever worker the kernel picks
// (SO_REUSEPORT); when it asks to resume a session another worker holds,
// that worker gets the connection through its mailbox (InboundSessions::adopt_resume).
// Shared by the workers: every call takes the lock, none is on the data
// path (sessions register once, and are looked up once per resume).
// It also keeps which workers hold a session to each peer when
// tunnel.sessions_per_peer caps them (Worker::hand_over_stream): asked once
// per stream that finds its worker's link to the peer without a session.
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "proxy/runtime/worker_mailbox.h"
#include "proxy/tunnel/frame.h"

namespace rdmagw {

class Worker;

class SessionDirectory {
 public:
  explicit SessionDirectory(std::vector<WorkerMailbox*> mailboxes)
      : mailboxes_(std::move(mailboxes)), workers_(mailboxes_.size(), nullptr) {}

  // A worker is there from its init to its destruction.
  void set_worker(unsigned index, Worker* worker);
  Worker* worker(unsigned index) const;

  void add(const tunnel::SessionToken& token, unsigned worker);
  // Only if `worker` still holds it.
  void remove(const tunnel::SessionToken& token, unsigned worker);
  std::optional<unsigned> holder(const tunnel::SessionToken& token) const;
  // tunnel.sessions_per_peer: the workers that may hold a session to a peer.
  // A worker claims a peer before it dials it; true if it holds a claim now
  // (had one, or fewer than `cap` workers had). It lets go once its link to
  // the peer has nothing (no session, dial or waiting stream).
  bool claim_peer(const std::string& peer, unsigned worker, unsigned cap);
  void release_peer(const std::string& peer, unsigned worker);
  // A worker other than `not_worker` holding a claim to `peer`.
  std::optional<unsigned> peer_holder(const std::string& peer, unsigned not_worker) const;
  // Runs `task` on `worker`'s thread; false if it stopped taking tasks.
  bool post(unsigned worker, WorkerMailbox::Task task);

 private:
  mutable std::mutex mu_;
  std::unordered_map<tunnel::SessionToken, unsigned, tunnel::SessionTokenHash> holders_;
  std::unordered_map<std::string, std::vector<unsigned>> peer_claims_;
  std::vector<WorkerMailbox*> mailboxes_;
  std::vector<Worker*> workers_;
};

}  // namespace rdmagw
