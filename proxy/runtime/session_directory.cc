// SPDX-License-Identifier: Apache-2.0
#include "proxy/runtime/session_directory.h"

namespace rdmagw {

void SessionDirectory::add(const tunnel::SessionToken& token, unsigned worker) {
  std::lock_guard lock(mu_);
  holders_[token] = worker;
}

void SessionDirectory::remove(const tunnel::SessionToken& token, unsigned worker) {
  std::lock_guard lock(mu_);
  auto it = holders_.find(token);
  if (it != holders_.end() && it->second == worker) holders_.erase(it);
}

std::optional<unsigned> SessionDirectory::holder(const tunnel::SessionToken& token) const {
  std::lock_guard lock(mu_);
  auto it = holders_.find(token);
  if (it == holders_.end()) return std::nullopt;
  return it->second;
}

void SessionDirectory::set_worker(unsigned index, Worker* worker) {
  std::lock_guard lock(mu_);
  if (index < workers_.size()) workers_[index] = worker;
}

Worker* SessionDirectory::worker(unsigned index) const {
  std::lock_guard lock(mu_);
  return index < workers_.size() ? workers_[index] : nullptr;
}

bool SessionDirectory::claim_peer(const std::string& peer, unsigned worker, unsigned cap) {
  std::lock_guard lock(mu_);
  std::vector<unsigned>& holders = peer_claims_[peer];
  for (unsigned w : holders)
    if (w == worker) return true;
  if (holders.size() >= cap) return false;
  holders.push_back(worker);
  return true;
}

void SessionDirectory::release_peer(const std::string& peer, unsigned worker) {
  std::lock_guard lock(mu_);
  auto it = peer_claims_.find(peer);
  if (it == peer_claims_.end()) return;
  std::erase(it->second, worker);
  if (it->second.empty()) peer_claims_.erase(it);
}

std::optional<unsigned> SessionDirectory::peer_holder(const std::string& peer, unsigned not_worker) const {
  std::lock_guard lock(mu_);
  auto it = peer_claims_.find(peer);
  if (it == peer_claims_.end()) return std::nullopt;
  for (unsigned w : it->second)
    if (w != not_worker) return w;
  return std::nullopt;
}

bool SessionDirectory::post(unsigned worker, WorkerMailbox::Task task) {
  if (worker >= mailboxes_.size()) return false;
  return mailboxes_[worker]->post(std::move(task));
}

}  // namespace rdmagw
