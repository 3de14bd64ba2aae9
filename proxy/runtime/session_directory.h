#pragma once
// Which worker holds each resumable session peers dialed to this process.
// A peer's new connection lands on whichever worker the kernel picks
// (SO_REUSEPORT); when it asks to resume a session another worker holds,
// that worker gets the connection through its mailbox (Worker::on_session_token).
// Shared by the workers: every call takes the lock, none is on the data
// path (sessions register once, and are looked up once per resume).
#include <mutex>
#include <optional>
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
  // Runs `task` on `worker`'s thread; false if it stopped taking tasks.
  bool post(unsigned worker, WorkerMailbox::Task task);

 private:
  mutable std::mutex mu_;
  std::unordered_map<tunnel::SessionToken, unsigned, tunnel::SessionTokenHash> holders_;
  std::vector<WorkerMailbox*> mailboxes_;
  std::vector<Worker*> workers_;
};

}  // namespace rdmagw
