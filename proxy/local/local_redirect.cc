// SPDX-License-Identifier: Apache-2.0
#include "proxy/local/local_redirect.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#if RDMAGW_HAVE_BPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "local_redirect.skel.h"
#endif
#include "proxy/local/bpf/local_redirect_shared.h"

namespace rdmagw::local {

static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) && std::atomic<uint64_t>::is_always_lock_free,
              "the read counters are shared with the BPF programs as plain 64-bit words");

std::optional<RedirectKey> redirect_key_of(int fd) {
  RedirectKey key;
  socklen_t length = sizeof(key.local);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&key.local), &length) != 0) return std::nullopt;
  length = sizeof(key.remote);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&key.remote), &length) != 0) return std::nullopt;
  if (key.local.ss_family != AF_INET && key.local.ss_family != AF_INET6) return std::nullopt;
  return key;
}

#if RDMAGW_HAVE_BPF

namespace {

// A socket address as the programs key it: IPv6, IPv4 as ::ffff:a.b.c.d.
void key_address(const sockaddr_storage& in, __u32 out[4], __u16* port) {
  std::memset(out, 0, 4 * sizeof(__u32));
  if (in.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(in);
    out[2] = htonl(0xffff);
    out[3] = a.sin_addr.s_addr;
    *port = ntohs(a.sin_port);
  } else {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(in);
    std::memcpy(out, &a.sin6_addr, 16);
    *port = ntohs(a.sin6_port);
  }
}

// The programs attached to the cgroup, each by its link, in the order a
// takeover sends the links.
struct LinkedProgram {
  ::bpf_program* (*program)(const ::local_redirect*);
  bpf_attach_type type;
  const char* name;
};
const LinkedProgram kLinks[] = {
    {[](const ::local_redirect* s) { return s->progs.local_redirect_sockops; }, BPF_CGROUP_SOCK_OPS, "sock_ops"},
    {[](const ::local_redirect* s) { return s->progs.local_redirect_connect4; }, BPF_CGROUP_INET4_CONNECT, "connect4"},
    {[](const ::local_redirect* s) { return s->progs.local_redirect_getpeername4; }, BPF_CGROUP_INET4_GETPEERNAME,
     "getpeername4"},
};

// The key of the flow `connection`'s own end sends (`own`), or its peer sends.
local_redirect_key flow_key(const RedirectKey& connection, bool own) {
  local_redirect_key key{};
  const sockaddr_storage& sender = own ? connection.local : connection.remote;
  const sockaddr_storage& receiver = own ? connection.remote : connection.local;
  key_address(sender, key.local_ip, &key.local_port);
  key_address(receiver, key.remote_ip, &key.remote_port);
  return key;
}

}  // namespace

std::unique_ptr<LocalRedirect> LocalRedirect::attach(const LocalRedirectOptions& options, std::string* why) {
  std::unique_ptr<LocalRedirect> r(new LocalRedirect(options));
  auto fail = [&](std::string what, int error) {
    *why = what + (error ? std::string(": ") + strerror(error) : std::string());
    r.reset();  // releases what was done so far
    return nullptr;
  };
  r->cgroup_ = UniqueFd(::open(options.cgroup.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!r->cgroup_.valid()) return fail("cannot open the cgroup " + options.cgroup, errno);
  // libbpf reports through its print callback; the reason given here is
  // what the caller logs.
  libbpf_set_print(nullptr);
  r->skeleton_ = local_redirect__open();
  if (!r->skeleton_) return fail("cannot open the BPF programs", errno);
  r->set_rodata();
  if (int error = local_redirect__load(r->skeleton_); error != 0)
    return fail(
        "the kernel refused the BPF programs (sock_ops, sk_msg and SOCKHASH are needed, and CAP_BPF with "
        "CAP_NET_ADMIN)",
        -error);
  if (!r->map_reads(&fail)) return nullptr;
  for (size_t i = 0; i < kLinkCount; ++i) {
    r->links_[i] = bpf_program__attach_cgroup(kLinks[i].program(r->skeleton_), r->cgroup_.get());
    if (!r->links_[i])
      return fail(std::string("cannot attach the ") + kLinks[i].name + " program to the cgroup " + options.cgroup,
                  errno);
  }
  if (bpf_prog_attach(bpf_program__fd(r->skeleton_->progs.local_redirect_msg), bpf_map__fd(r->skeleton_->maps.sockets),
                      BPF_SK_MSG_VERDICT, 0) != 0)
    return fail("cannot attach the sk_msg program to its SOCKHASH", errno);
  r->msg_attached_ = true;
  r->init_slots();
  return r;
}

std::vector<::bpf_map*> LocalRedirect::maps() const {
  // The order a takeover sends them in, after the link.
  auto& m = skeleton_->maps;
  return {m.sockets, m.flows, m.admissions, m.reads, m.ports, m.stats, m.captures, m.destinations, m.accepted};
}

std::unique_ptr<LocalRedirect> LocalRedirect::adopt(const LocalRedirectOptions& options, LocalRedirectHandover handover,
                                                    std::string* why) {
  std::unique_ptr<LocalRedirect> r(new LocalRedirect(options));
  auto fail = [&](std::string what, int error) {
    *why = what + (error ? std::string(": ") + strerror(error) : std::string());
    r.reset();
    return nullptr;
  };
  if (handover.layout != LOCAL_REDIRECT_LAYOUT)
    return fail("the running rdmagw's redirect maps have layout " + std::to_string(handover.layout) +
                    ", this build's programs use layout " + std::to_string(LOCAL_REDIRECT_LAYOUT),
                0);
  if (handover.cgroup != options.cgroup)
    return fail("the running rdmagw redirects in the cgroup " + handover.cgroup + ", this configuration names " +
                    options.cgroup,
                0);
  r->cgroup_ = UniqueFd(::open(options.cgroup.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!r->cgroup_.valid()) return fail("cannot open the cgroup " + options.cgroup, errno);
  struct stat cgroup_stat {};
  if (::fstat(r->cgroup_.get(), &cgroup_stat) != 0) return fail("cannot stat the cgroup " + options.cgroup, errno);
  libbpf_set_print(nullptr);
  r->skeleton_ = local_redirect__open();
  if (!r->skeleton_) return fail("cannot open the BPF programs", errno);
  r->set_rodata();
  std::vector<::bpf_map*> maps = r->maps();
  if (handover.fds.size() != kLinkCount + maps.size())
    return fail(std::to_string(handover.fds.size()) + " descriptors came with the maps, not " +
                    std::to_string(kLinkCount + maps.size()),
                0);
  // Each link must be its program's attachment to this very cgroup.
  __u32 length = 0;
  for (size_t i = 0; i < kLinkCount; ++i) {
    bpf_link_info link{};
    length = sizeof(link);
    if (bpf_obj_get_info_by_fd(handover.fds[i].get(), &link, &length) != 0)
      return fail(std::string("the takeover's ") + kLinks[i].name + " descriptor is not a BPF link", errno);
    if (link.type != BPF_LINK_TYPE_CGROUP || link.cgroup.attach_type != kLinks[i].type ||
        link.cgroup.cgroup_id != cgroup_stat.st_ino)
      return fail(std::string("the takeover's link is not a ") + kLinks[i].name + " attachment to " + options.cgroup,
                  0);
  }
  // libbpf takes a reused map's definition from the kernel: a map that
  // differs from what this build's programs were compiled against is
  // refused here, not left to the verifier.
  for (size_t i = 0; i < maps.size(); ++i) {
    int fd = handover.fds[kLinkCount + i].get();
    bpf_map_info info{};
    length = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &length) != 0)
      return fail(std::string("the takeover's map ") + bpf_map__name(maps[i]) + " is not a BPF map", errno);
    if (info.type != bpf_map__type(maps[i]) || info.key_size != bpf_map__key_size(maps[i]) ||
        info.value_size != bpf_map__value_size(maps[i]) || info.max_entries != bpf_map__max_entries(maps[i]) ||
        info.map_flags != bpf_map__map_flags(maps[i]))
      return fail(std::string("the takeover's map ") + bpf_map__name(maps[i]) +
                      " differs from this build's (type, key, value, size or flags)",
                  0);
    if (int error = bpf_map__reuse_fd(maps[i], fd); error != 0)
      return fail(std::string("cannot reuse the takeover's map ") + bpf_map__name(maps[i]), -error);
  }
  if (int error = local_redirect__load(r->skeleton_); error != 0)
    return fail("the kernel refused the BPF programs on the takeover's maps", -error);
  if (!r->map_reads(&fail)) return nullptr;
  for (size_t i = 0; i < kLinkCount; ++i) r->adopted_links_[i] = std::move(handover.fds[i]);
  // The ports the old process named stay named until this one removes them.
  __u16 port = 0, next = 0;
  for (const __u16* at = nullptr; bpf_map__get_next_key(r->skeleton_->maps.ports, at, &next, sizeof(next)) == 0;
       at = &port) {
    port = next;
    r->port_bits_[port / 64].fetch_or(uint64_t{1} << (port % 64), std::memory_order_relaxed);
  }
  r->init_slots();
  return r;
}

bool LocalRedirect::take_charge(std::string* why) {
  if (!adopted_links_[0].valid()) return true;
  for (size_t i = 0; i < kLinkCount; ++i)
    if (bpf_link_update(adopted_links_[i].get(), bpf_program__fd(kLinks[i].program(skeleton_)), nullptr) != 0) {
      *why =
          std::string("cannot put this build's ") + kLinks[i].name + " program on the cgroup link: " + strerror(errno);
      return false;
    }
  if (bpf_prog_attach(bpf_program__fd(skeleton_->progs.local_redirect_msg), bpf_map__fd(skeleton_->maps.sockets),
                      BPF_SK_MSG_VERDICT, 0) != 0) {
    *why = std::string("cannot put this build's sk_msg program on the SOCKHASH: ") + strerror(errno);
    return false;
  }
  msg_attached_ = true;
  return true;
}

std::vector<int> LocalRedirect::handover_fds() const {
  std::vector<int> fds;
  for (size_t i = 0; i < kLinkCount; ++i)
    fds.push_back(adopted_links_[i].valid() ? adopted_links_[i].get() : bpf_link__fd(links_[i]));
  for (::bpf_map* m : maps()) fds.push_back(bpf_map__fd(m));
  return fds;
}

uint32_t LocalRedirect::layout() { return LOCAL_REDIRECT_LAYOUT; }

void LocalRedirect::set_rodata() {
  skeleton_->rodata->max_in_flight = options_.max_in_flight;
  skeleton_->rodata->exempt_uid = options_.exempt_uid;
  skeleton_->rodata->exempt_gid = options_.exempt_gid;
}

bool LocalRedirect::set_captures(const std::vector<ConnectCapture>& captures, std::string* why) {
  if (!captures.empty() && options_.exempt_uid == 0 && options_.exempt_gid == 0) {
    *why =
        "rdmagw runs as uid 0 and gid 0, so its own connects could not be told from the applications' (run it "
        "with a uid or a gid of its own)";
    return false;
  }
  if (captures.size() > kMaxConnectCaptures) {
    *why = std::to_string(captures.size()) + " destination ranges, more than " + std::to_string(kMaxConnectCaptures);
    return false;
  }
  // Every slot written, the list ended by a zero to_port: a shorter list
  // leaves nothing of a longer one behind.
  for (uint32_t i = 0; i < kMaxConnectCaptures; ++i) {
    local_redirect_capture rule{};
    if (i < captures.size()) {
      rule.addr = captures[i].address;
      rule.mask = captures[i].mask;
      rule.port_lo = captures[i].port_lo;
      rule.port_hi = captures[i].port_hi;
      rule.to_port = captures[i].to_port;
    }
    if (bpf_map__update_elem(skeleton_->maps.captures, &i, sizeof(i), &rule, sizeof(rule), BPF_ANY) != 0) {
      *why = std::string("the captures map refused an entry: ") + strerror(errno);
      return false;
    }
  }
  return true;
}

std::optional<sockaddr_storage> LocalRedirect::take_destination(const sockaddr_storage& client) {
  if (client.ss_family != AF_INET) return std::nullopt;
  const auto& in = reinterpret_cast<const sockaddr_in&>(client);
  local_redirect_client key{};
  key.addr = in.sin_addr.s_addr;
  key.port = ntohs(in.sin_port);
  local_redirect_destination d{};
  if (bpf_map__lookup_and_delete_elem(skeleton_->maps.accepted, &key, sizeof(key), &d, sizeof(d), 0) != 0)
    return std::nullopt;
  sockaddr_storage out{};
  auto& dst = reinterpret_cast<sockaddr_in&>(out);
  dst.sin_family = AF_INET;
  dst.sin_addr.s_addr = d.addr;
  dst.sin_port = htons(d.port);
  return out;
}

template <typename Fail>
bool LocalRedirect::map_reads(Fail* fail) {
  int reads_fd = bpf_map__fd(skeleton_->maps.reads);
  reads_bytes_ = sizeof(uint64_t) * LOCAL_REDIRECT_MAX_SLOTS;
  void* shared = ::mmap(nullptr, reads_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, reads_fd, 0);
  if (shared == MAP_FAILED) {
    (*fail)("cannot map the read counters", errno);
    return false;
  }
  reads_ = static_cast<std::atomic<uint64_t>*>(shared);
  return true;
}

void LocalRedirect::release() {
  // Handed over, the programs stay attached for the new process (which
  // holds the link and has put its own sk_msg program on the map).
  if (msg_attached_ && !handed_over_)
    bpf_prog_detach2(bpf_program__fd(skeleton_->progs.local_redirect_msg), bpf_map__fd(skeleton_->maps.sockets),
                     BPF_SK_MSG_VERDICT);
  msg_attached_ = false;
  // Closes our descriptors of the links: each detaches only with its last one.
  for (::bpf_link*& link : links_) {
    if (link) bpf_link__destroy(link);
    link = nullptr;
  }
  if (reads_) ::munmap(reads_, reads_bytes_);
  reads_ = nullptr;
  if (skeleton_) local_redirect__destroy(skeleton_);
  skeleton_ = nullptr;
}

bool LocalRedirect::add_port(uint16_t port, std::string* why) {
  std::atomic<uint64_t>& word = port_bits_[port / 64];
  uint64_t bit = uint64_t{1} << (port % 64);
  if (word.load(std::memory_order_acquire) & bit) return true;
  __u8 one = 1;
  if (bpf_map__update_elem(skeleton_->maps.ports, &port, sizeof(port), &one, sizeof(one), BPF_ANY) != 0) {
    *why = "port " + std::to_string(port) + ": " + strerror(errno);
    return false;
  }
  word.fetch_or(bit, std::memory_order_acq_rel);
  return true;
}

void LocalRedirect::remove_port(uint16_t port) {
  port_bits_[port / 64].fetch_and(~(uint64_t{1} << (port % 64)), std::memory_order_acq_rel);
  bpf_map__delete_elem(skeleton_->maps.ports, &port, sizeof(port), 0);
}

void LocalRedirect::init_slots() {
  free_slots_.reserve(LOCAL_REDIRECT_MAX_SLOTS);
  for (uint32_t slot = LOCAL_REDIRECT_MAX_SLOTS; slot-- > 0;) free_slots_.push_back(slot);
  slot_used_.assign(LOCAL_REDIRECT_MAX_SLOTS, 0);
}

std::atomic<uint64_t>* LocalRedirect::claim_slot(uint32_t slot) {
  std::lock_guard lock(mu_);
  if (slot >= slot_used_.size() || slot_used_[slot]) return nullptr;
  slot_used_[slot] = 1;  // left in free_slots_: admit_reader() skips it
  return &reads_[slot];
}

std::atomic<uint64_t>* LocalRedirect::admit_reader(const RedirectKey& connection) {
  uint32_t slot;
  {
    std::lock_guard lock(mu_);
    do {
      if (free_slots_.empty()) return nullptr;
      slot = free_slots_.back();
      free_slots_.pop_back();
    } while (slot_used_[slot]);
    slot_used_[slot] = 1;
  }
  reads_[slot].store(0, std::memory_order_relaxed);
  local_redirect_key key = flow_key(connection, false);
  local_redirect_admission admission{slot, 0};
  if (bpf_map__update_elem(skeleton_->maps.admissions, &key, sizeof(key), &admission, sizeof(admission), BPF_ANY) !=
      0) {
    std::lock_guard lock(mu_);
    slot_used_[slot] = 0;
    free_slots_.push_back(slot);
    return nullptr;
  }
  return &reads_[slot];
}

bool LocalRedirect::admit_sender(const RedirectKey& connection) { return send_by_tcp(connection, false); }

bool LocalRedirect::send_by_tcp(const RedirectKey& connection, bool by_tcp) {
  local_redirect_key key = flow_key(connection, true);
  local_redirect_admission admission{0, static_cast<__u32>(by_tcp ? LOCAL_REDIRECT_SEND_BY_TCP : LOCAL_REDIRECT_SEND)};
  return bpf_map__update_elem(skeleton_->maps.admissions, &key, sizeof(key), &admission, sizeof(admission), BPF_ANY) ==
         0;
}

void LocalRedirect::forget(const RedirectKey& connection, std::atomic<uint64_t>* counter) {
  if (handed_over_.load(std::memory_order_acquire)) return;
  for (bool own : {true, false}) {
    local_redirect_key key = flow_key(connection, own);
    bpf_map__delete_elem(skeleton_->maps.admissions, &key, sizeof(key), 0);
  }
  if (!counter) return;
  std::lock_guard lock(mu_);
  uint32_t slot = slot_of(counter);
  slot_used_[slot] = 0;
  free_slots_.push_back(slot);
}

LocalRedirectStats LocalRedirect::stats() const {
  LocalRedirectStats total;
  int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return total;
  std::vector<local_redirect_stats> per_cpu(static_cast<size_t>(cpus));
  __u32 zero = 0;
  if (bpf_map__lookup_elem(skeleton_->maps.stats, &zero, sizeof(zero), per_cpu.data(),
                           per_cpu.size() * sizeof(local_redirect_stats), 0) != 0)
    return total;
  for (const auto& s : per_cpu) {
    total.sockets_added += s.sockets_added;
    total.sockets_refused += s.sockets_refused;
    total.messages_redirected += s.msgs_redirected;
    total.bytes_redirected += s.bytes_redirected;
    total.messages_tcp += s.msgs_tcp;
    total.bytes_tcp += s.bytes_tcp;
    total.flows_to_tcp += s.flows_to_tcp;
  }
  return total;
}

#else  // built without libbpf, bpftool or clang

std::unique_ptr<LocalRedirect> LocalRedirect::attach(const LocalRedirectOptions&, std::string* why) {
  *why = "this rdmagw was built without the BPF programs (clang, bpftool or libbpf-dev were missing)";
  return nullptr;
}
void LocalRedirect::release() {}
std::unique_ptr<LocalRedirect> LocalRedirect::adopt(const LocalRedirectOptions&, LocalRedirectHandover,
                                                    std::string* why) {
  *why = "this rdmagw was built without the BPF programs (clang, bpftool or libbpf-dev were missing)";
  return nullptr;
}
bool LocalRedirect::take_charge(std::string*) { return false; }
bool LocalRedirect::set_captures(const std::vector<ConnectCapture>&, std::string*) { return false; }
std::optional<sockaddr_storage> LocalRedirect::take_destination(const sockaddr_storage&) { return std::nullopt; }
std::vector<int> LocalRedirect::handover_fds() const { return {}; }
uint32_t LocalRedirect::layout() { return 0; }
std::atomic<uint64_t>* LocalRedirect::claim_slot(uint32_t) { return nullptr; }
bool LocalRedirect::add_port(uint16_t, std::string*) { return false; }
void LocalRedirect::remove_port(uint16_t) {}
std::atomic<uint64_t>* LocalRedirect::admit_reader(const RedirectKey&) { return nullptr; }
bool LocalRedirect::admit_sender(const RedirectKey&) { return false; }
bool LocalRedirect::send_by_tcp(const RedirectKey&, bool) { return false; }
void LocalRedirect::forget(const RedirectKey&, std::atomic<uint64_t>*) {}
LocalRedirectStats LocalRedirect::stats() const { return {}; }

#endif

LocalRedirect::~LocalRedirect() { release(); }

}  // namespace rdmagw::local
