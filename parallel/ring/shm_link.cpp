// parallel/ring/shm_link.cpp: the shared-memory channel, its setup and exchange().
#include "parallel/ring/shm_link.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX kill(), which <csignal> need not declare
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace parallel {

namespace {
// 16 slots of 128 KiB: enough in flight to keep the receiver busy while the sender copies, small
// enough that a slot being reduced stays in the L2 cache.
constexpr int kSlots = 16;
constexpr size_t kSlotBytes = 128 << 10;
}  // namespace

struct ShmLink::Channel {
  struct SlotInfo {
    uint64_t tag;            // the message this piece belongs to
    uint64_t message_bytes;  // the whole message's length, checked against what the reader expects
    uint64_t piece_bytes;    // bytes in this slot
  };
  alignas(64) std::atomic<uint64_t> head;  // pieces written, ever (only the writer stores it)
  alignas(64) std::atomic<uint64_t> tail;  // pieces consumed, ever (only the reader stores it)
  alignas(64) std::atomic<uint32_t> aborted;
  char abort_reason[256];
  SlotInfo info[kSlots];
  alignas(64) uint8_t slots[kSlots][kSlotBytes];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");

namespace {

// Ranks can share memory, and see each other's pids, when they agree on all four: hostname, boot id
// (differs between machines that share a hostname), pid namespace (differs between containers) and
// network namespace (differs between the emulated hosts of tools/cluster.sh, which share everything
// else: ranks there must talk as separate machines do, over TCP).
std::string read_link(const char* path) {
  char target[128] = {};
  const ssize_t n = ::readlink(path, target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

std::string host_identity() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  return std::string(host) + "/" + boot_id + "/" + read_link("/proc/self/ns/pid") + "/" +
         read_link("/proc/self/ns/net");
}

ShmLink::Channel* map_channel(const std::string& name, bool create) {
  const int fd = ::shm_open(name.c_str(), create ? (O_CREAT | O_EXCL | O_RDWR) : O_RDWR, 0600);
  RINGGRAD_CHECK(
      fd >= 0, "ring: shm_open('", name, "') failed: ", std::strerror(errno),
      create ? "" : " (are all ranks on this host and in one /dev/shm namespace? else use transport \"tcp\")");
  if (create && ::ftruncate(fd, sizeof(ShmLink::Channel)) != 0) {
    const int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw Error(detail::str("ring: cannot size shared memory '", name, "' to ", sizeof(ShmLink::Channel),
                            " bytes: ", std::strerror(err), " (is /dev/shm large enough?)"));
  }
  void* memory = ::mmap(nullptr, sizeof(ShmLink::Channel), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the memory alive
  RINGGRAD_CHECK(memory != MAP_FAILED, "ring: mmap of '", name, "' failed: ", std::strerror(errno));
  // A fresh segment is zero-filled, which is exactly head = tail = aborted = 0.
  return static_cast<ShmLink::Channel*>(memory);
}

// A process that exited is gone (ESRCH) or, until its parent reaps it, a zombie.
// True when the process is stopped: state T (a signal) or t (a tracer) in /proc/<pid>/stat, read
// after the last ')' since the command name in parentheses may itself hold spaces.
bool process_stopped(pid_t pid) {
  if (pid <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && (text[close + 2] == 'T' || text[close + 2] == 't');
}

bool process_alive(pid_t pid) {
  if (pid <= 0) return true;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_text, comm, state;
  if (stat >> pid_text >> comm >> state) return state != "Z";
  return true;
}

}  // namespace

bool all_ranks_on_this_host(Store& store, int rank, int size) {
  const std::string me = host_identity();
  store.set("ring/host/" + std::to_string(rank), me);
  for (int r = 0; r < size; ++r)
    if (store.get_string("ring/host/" + std::to_string(r)) != me) return false;
  return true;
}

ShmLink::ShmLink(Store& store, int rank, int size, Deadline deadline)
    : rank_(rank), next_rank_((rank + 1) % size), prev_rank_((rank + size - 1) % size) {
  (void)deadline;  // the store's own timeout bounds every wait below
  // One random job id from rank 0 keeps two jobs on one host from opening each other's channels.
  if (rank == 0) {
    std::random_device device;
    store.set("ring/shm/job", detail::str(std::hex, device(), device()));
  }
  const std::string job = store.get_string("ring/shm/job");
  auto channel_name = [&job](int r) { return "/ringgrad-" + job + "-" + std::to_string(r); };

  in_name_ = channel_name(rank);
  in_ = map_channel(in_name_, /*create=*/true);
  try {
    store.set("ring/shm/" + std::to_string(rank) + "/pid", std::to_string(::getpid()));
    next_pid_ = std::stoi(store.get_string("ring/shm/" + std::to_string(next_rank_) + "/pid"));
    prev_pid_ = std::stoi(store.get_string("ring/shm/" + std::to_string(prev_rank_) + "/pid"));
    out_ = map_channel(channel_name(next_rank_), /*create=*/false);
    store.set("ring/shm/" + std::to_string(rank) + "/mapped", "1");
    // Once the previous rank has mapped my channel, nobody needs its name any more.
    store.wait({"ring/shm/" + std::to_string(prev_rank_) + "/mapped"});
  } catch (...) {
    // A constructor that throws runs no destructor: give back the named segment here, or a failed
    // setup (a peer that died, a store timeout) would leave it in /dev/shm.
    ::shm_unlink(in_name_.c_str());
    ::munmap(in_, sizeof(Channel));
    if (out_) ::munmap(out_, sizeof(Channel));
    throw;
  }
  ::shm_unlink(in_name_.c_str());
  in_unlinked_ = true;
}

ShmLink::~ShmLink() {
  if (in_ && !in_unlinked_) ::shm_unlink(in_name_.c_str());
  if (in_) ::munmap(in_, sizeof(Channel));
  if (out_) ::munmap(out_, sizeof(Channel));
}

// Called when neither direction could move: spin (a neighbour on another core answers within
// nanoseconds), then yield the core (ranks may outnumber cores), then nap. While napping, check
// the deadline, the abort flags and whether the neighbours still live.
void ShmLink::wait_a_little(int& idle_rounds, Deadline deadline, uint64_t tag, bool receiving) {
  ++idle_rounds;
  if (idle_rounds < 256) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    return;
  }
  if (idle_rounds < 512) {
    sched_yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(20));
  const auto now = Clock::now();
  if (now - last_liveness_check_ < std::chrono::milliseconds(20)) return;
  last_liveness_check_ = now;
  for (Channel* c : {in_, out_})
    if (c->aborted.load(std::memory_order_acquire))
      throw Error(detail::str("ring: a neighbour aborted (", c->abort_reason, ") during ", describe_tag(tag)));
  // Only the neighbour being waited for must be alive: one that finished its part of the last
  // collective may already have exited, normally.
  const int peer = receiving ? prev_rank_ : next_rank_;
  const pid_t peer_pid = receiving ? prev_pid_ : next_pid_;
  RINGGRAD_CHECK(process_alive(peer_pid), "ring: rank ", peer, " (pid ", peer_pid, ") died during ", describe_tag(tag));
  RINGGRAD_CHECK(now < deadline, "ring: timed out at ", describe_tag(tag), " waiting for rank ", peer,
                 receiving ? " to send" : " to take data",
                 process_stopped(peer_pid)
                     ? detail::str("; rank ", peer, " (pid ", peer_pid, ") is stopped (SIGSTOP, Ctrl-Z or a debugger)")
                     : std::string());
}

void ShmLink::exchange(uint64_t send_tag, const void* send, size_t send_bytes, uint64_t recv_tag, void* recv_into,
                       size_t recv_bytes, const OnReceived& on_received, Deadline deadline) {
  size_t sent = 0, received = 0;
  int idle_rounds = 0;
  while (sent < send_bytes || received < recv_bytes) {
    bool moved = false;
    if (sent < send_bytes) {
      const uint64_t head = out_->head.load(std::memory_order_relaxed);
      if (head - out_->tail.load(std::memory_order_acquire) < static_cast<uint64_t>(kSlots)) {
        const size_t piece = std::min(kSlotBytes, send_bytes - sent);
        std::memcpy(out_->slots[head % kSlots], static_cast<const uint8_t*>(send) + sent, piece);
        out_->info[head % kSlots] = {send_tag, send_bytes, piece};
        out_->head.store(head + 1, std::memory_order_release);  // publishes the slot's bytes and info
        sent += piece;
        moved = true;
      }
    }
    if (received < recv_bytes) {
      const uint64_t tail = in_->tail.load(std::memory_order_relaxed);
      if (in_->head.load(std::memory_order_acquire) > tail) {
        const Channel::SlotInfo info = in_->info[tail % kSlots];
        RINGGRAD_CHECK(
            info.tag == recv_tag && info.message_bytes == recv_bytes && info.piece_bytes <= recv_bytes - received,
            "ring: rank ", prev_rank_, " sent ", info.message_bytes, " bytes for ", describe_tag(info.tag),
            ", but this rank (", rank_, ") expected ", recv_bytes, " bytes for ", describe_tag(recv_tag),
            " -- do all ranks run the same collectives, in the same order, on tensors of the same size?");
        const uint8_t* piece = in_->slots[tail % kSlots];
        if (recv_into != nullptr) {
          std::memcpy(static_cast<uint8_t*>(recv_into) + received, piece, info.piece_bytes);
          piece = static_cast<const uint8_t*>(recv_into) + received;
        }
        if (on_received) on_received(piece, received, info.piece_bytes);
        in_->tail.store(tail + 1, std::memory_order_release);  // the slot may now be overwritten
        received += info.piece_bytes;
        moved = true;
      }
    }
    if (moved) {
      idle_rounds = 0;
    } else {
      wait_a_little(idle_rounds, deadline, received < recv_bytes ? recv_tag : send_tag, received < recv_bytes);
    }
  }
}

void ShmLink::abort(const std::string& reason) {
  for (Channel* c : {in_, out_}) {
    if (c == nullptr) continue;
    const std::string text = detail::str("rank ", rank_, ": ", reason);
    std::strncpy(c->abort_reason, text.c_str(), sizeof(c->abort_reason) - 1);
    c->aborted.store(1, std::memory_order_release);
  }
}

}  // namespace parallel
}  // namespace ringgrad
