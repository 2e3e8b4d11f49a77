// parallel/ring/shm_link.cpp: the shared-memory channel, and the two halves that use it.
#include "parallel/ring/shm_link.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <utility>

#include <ringgrad/core/base/error.h>
#include "parallel/ring/futex.h"

namespace ringgrad {
namespace parallel {

namespace {
// 16 slots of 128 KiB: enough in flight to keep the receiver busy while the sender copies, small
// enough that a slot being reduced stays in the L2 cache.
constexpr int kSlots = 16;
constexpr size_t kSlotBytes = 128 << 10;
// head and tail count modulo 2^32; `count % kSlots` names the same slot across the wrap.
static_assert((uint64_t{1} << 32) % kSlots == 0, "kSlots must divide 2^32");
}  // namespace

struct ShmChannel {
  // A random number the creator writes and publishes with the channel's address: the sender checks
  // it, so a /proc/<pid>/fd/<n> that has come to mean another file (the creator died and its pid was
  // reused) is refused instead of written into.
  uint64_t cookie;
  struct SlotInfo {
    uint64_t tag;            // the message this piece belongs to
    uint64_t message_bytes;  // the whole message's length, checked against what the reader expects
    uint64_t piece_bytes;    // bytes in this slot
  };
  // Pieces written and consumed, modulo 2^32 (each stored by one side only). They are also the
  // futex words (futex.h): a reader with nothing to read sleeps on head until the writer moves it, a
  // writer with no free slot on tail until the reader moves it.
  alignas(64) std::atomic<uint32_t> head;  // only the writer stores it
  alignas(64) std::atomic<uint32_t> tail;  // only the reader stores it
  // 1 while that side may be asleep on the other's counter. The other side reads it after each
  // store to its counter and makes the FUTEX_WAKE system call only when it is set, so a rank that
  // keeps up with its neighbour moves data with no system call at all.
  alignas(64) std::atomic<uint32_t> reader_sleeping;
  alignas(64) std::atomic<uint32_t> writer_sleeping;
  alignas(64) std::atomic<uint32_t> aborted;
  char abort_reason[256];
  SlotInfo info[kSlots];
  alignas(64) uint8_t slots[kSlots][kSlotBytes];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared-memory atomics must be lock-free");

namespace {

std::string read_link(const char* path) {
  char target[128] = {};
  const ssize_t n = ::readlink(path, target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

}  // namespace

// Ranks can share memory, and see each other's pids, when they agree on all four: hostname, boot id
// (differs between machines that share a hostname), pid namespace (differs between containers) and
// network namespace (differs between the emulated hosts of tools/cluster.sh, which share everything
// else: ranks there must talk as separate machines do, over TCP).
//
// RINGGRAD_HOST_ID, when set and not empty, is the identity instead (as NCCL_HOSTID is NCCL's): ranks
// with different ids are on different hosts as far as the ring goes -- TCP between them, even on one
// machine, which lets tests emulate hosts without root -- and ranks with the same id must really
// share a pid namespace (a channel is opened through /proc/<pid>/fd).
std::string host_identity() {
  if (const char* id = std::getenv("RINGGRAD_HOST_ID"); id != nullptr && *id != '\0') return id;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  return std::string(host) + "/" + boot_id + "/" + read_link("/proc/self/ns/pid") + "/" +
         read_link("/proc/self/ns/net");
}

namespace {

// A channel's memory file is named "ringgrad-ring-<rank>" (what /proc/<pid>/fd shows as
// "/memfd:ringgrad-ring-<rank> (deleted)"), and sealed at its size.
constexpr const char* kChannelName = "ringgrad-ring-";
constexpr int kChannelSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
#ifdef MFD_NOEXEC_SEAL
constexpr unsigned kMemfdNoExecSeal = MFD_NOEXEC_SEAL;
#else
constexpr unsigned kMemfdNoExecSeal = 0x0008U;  // Linux 6.3; older headers lack it
#endif

// Maps `fd`, a memory file of sizeof(ShmChannel) bytes, shared: the mapping keeps the memory alive
// once fd is closed.
ShmChannel* map_channel(int fd, const char* what) {
  void* memory = ::mmap(nullptr, sizeof(ShmChannel), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  RINGGRAD_CHECK(memory != MAP_FAILED, "ring: mmap of ", what, " failed: ", std::strerror(errno));
  return static_cast<ShmChannel*>(memory);
}

// A channel's address in the store: "pid:fd:cookie" -- the creator's pid and its descriptor of the
// memory file, so that a process may open it as /proc/<pid>/fd/<fd> -- and its parts back.
struct ChannelAddress {
  pid_t pid = 0;
  int fd = -1;
  uint64_t cookie = 0;
};

std::string format_address(const ChannelAddress& a) { return detail::str(a.pid, ":", a.fd, ":", std::hex, a.cookie); }

ChannelAddress parse_address(const std::string& text, int rank) {
  ChannelAddress a;
  unsigned long long cookie = 0;
  int used = 0;
  const bool ok = std::sscanf(text.c_str(), "%d:%d:%llx%n", &a.pid, &a.fd, &cookie, &used) == 3 &&
                  static_cast<size_t>(used) == text.size() && a.pid > 0 && a.fd >= 0;
  RINGGRAD_CHECK(ok, "ring: rank ", rank, " published a malformed shared-memory channel '", detail::printable(text),
                 "' (expected pid:fd:cookie)");
  a.cookie = cookie;
  return a;
}

std::string pid_key(const std::string& keys, int rank) { return keys + "/pid/" + std::to_string(rank); }
std::string channel_key(const std::string& keys, int rank) {
  return keys + "/shm/" + std::to_string(rank) + "/channel";
}
std::string mapped_key(const std::string& keys, int rank) { return keys + "/shm/" + std::to_string(rank) + "/mapped"; }

// Moves this side's `counter` (head or tail) to `value` -- which also publishes the slot written or
// frees the slot read -- and wakes the other side if it may be asleep on it. This side stores the
// counter, then loads the flag; sleep_while stores the flag, then loads the counter. All four are
// sequentially consistent, so at least one side sees the other's store: either the sleeper sees the
// new count and does not sleep, or this side sees the flag and wakes it (a sleep that starts after
// the wake-up finds the new count in the kernel and returns at once). No wake-up is lost.
void advance(std::atomic<uint32_t>& counter, uint32_t value, const std::atomic<uint32_t>& sleeping) {
  counter.store(value, std::memory_order_seq_cst);
  if (sleeping.load(std::memory_order_seq_cst) != 0) futex_wake(&counter);
}

// Sleeps while the other side's `counter` still equals `unchanged`, for at most `timeout`.
void sleep_while(std::atomic<uint32_t>& counter, uint32_t unchanged, std::atomic<uint32_t>& sleeping,
                 std::chrono::microseconds timeout) {
  sleeping.store(1, std::memory_order_seq_cst);
  if (counter.load(std::memory_order_seq_cst) == unchanged) futex_wait(&counter, unchanged, timeout);
  sleeping.store(0, std::memory_order_relaxed);
}

void set_abort(ShmChannel* channel, int rank, const std::string& reason) {
  if (channel == nullptr) return;
  const std::string text = detail::str("rank ", rank, ": ", reason);
  std::strncpy(channel->abort_reason, text.c_str(), sizeof(channel->abort_reason) - 1);
  channel->aborted.store(1, std::memory_order_release);
}

void check_not_aborted(const ShmChannel* channel, uint64_t tag) {
  if (channel->aborted.load(std::memory_order_acquire))
    throw Error(detail::str("ring: a neighbour aborted (", channel->abort_reason, ") during ", describe_tag(tag)));
}

// While a message is under way, the neighbour it waits for must be alive, and the deadline not past.
// (A neighbour with nothing to do may have exited, normally: it finished its part of the last one.)
void check_peer(const std::string& peer, pid_t peer_pid, bool timed_out, uint64_t tag, bool receiving) {
  RINGGRAD_CHECK(process_alive(peer_pid), "ring: ", peer, " (pid ", peer_pid, ") died during ", describe_tag(tag));
  RINGGRAD_CHECK(!timed_out, "ring: timed out at ", describe_tag(tag), " waiting for ", peer,
                 receiving ? " to send" : " to take data", stopped_note(peer, peer_pid));
}

}  // namespace

// ---- receiving -----------------------------------------------------------------------------------

ShmRecv::ShmRecv(Store& store, std::string keys, int rank, int prev, const std::string& here)
    : store_(store), keys_(std::move(keys)), rank_(rank), prev_(prev), prev_name_(peer_name(prev, here)) {
  // An anonymous memory file, not a named segment in /dev/shm: it has no name to be left behind. Its
  // memory goes when the last descriptor and mapping of it go, when processes exit normally or are
  // killed alike. The previous rank opens it through /proc/<our pid>/fd/<fd> while we hold the fd.
  // Not executable (kernels that may refuse a memory file without that said, vm.memfd_noexec, want
  // it said; older ones do not know the flag: EINVAL), and sealed at its size once sized, so that the
  // neighbour can check it maps a file that can neither shrink under it (SIGBUS) nor grow.
  const std::string name = detail::str(kChannelName, rank);
  fd_ = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING | kMemfdNoExecSeal);
  if (fd_ < 0 && errno == EINVAL) fd_ = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  RINGGRAD_CHECK(fd_ >= 0, "ring: memfd_create failed: ", std::strerror(errno));
  if (::ftruncate(fd_, sizeof(ShmChannel)) != 0 || ::fcntl(fd_, F_ADD_SEALS, kChannelSeals) != 0) {
    const int err = errno;
    ::close(fd_);
    throw Error(detail::str("ring: cannot size and seal a shared-memory channel of ", sizeof(ShmChannel),
                            " bytes: ", std::strerror(err)));
  }
  try {
    channel_ = map_channel(fd_, "a new shared-memory channel");
    // A fresh memory file is zero-filled, which is exactly head = tail = 0, nobody asleep, not aborted.
    std::random_device device;
    const uint64_t cookie = (uint64_t{device()} << 32) | device();
    channel_->cookie = cookie;
    store.set(pid_key(keys_, rank), std::to_string(::getpid()));
    store.set(channel_key(keys_, rank), format_address({::getpid(), fd_, cookie}));
  } catch (...) {
    // A constructor that throws runs no destructor.
    if (channel_ != nullptr) ::munmap(channel_, sizeof(ShmChannel));
    ::close(fd_);
    throw;
  }
}

void ShmRecv::accept(Deadline deadline) {
  (void)deadline;  // the store's own timeout bounds the wait
  // Once the previous rank has mapped the channel, nobody needs to open it again.
  store_.wait({mapped_key(keys_, prev_)});
  prev_pid_ = std::stoi(store_.get_string(pid_key(keys_, prev_)));
  ::close(fd_);
  fd_ = -1;
}

ShmRecv::~ShmRecv() {
  if (fd_ >= 0) ::close(fd_);
  ::munmap(channel_, sizeof(ShmChannel));
}

void ShmRecv::begin(uint64_t tag, void* into, size_t bytes, const OnReceived* on_received) {
  tag_ = tag;
  into_ = static_cast<uint8_t*>(into);
  bytes_ = bytes;
  received_ = 0;
  on_received_ = on_received;
}

bool ShmRecv::progress() {
  const uint32_t tail = channel_->tail.load(std::memory_order_relaxed);
  if (channel_->head.load(std::memory_order_acquire) == tail) return false;  // empty
  const ShmChannel::SlotInfo info = channel_->info[tail % kSlots];
  RINGGRAD_CHECK(info.tag == tag_ && info.message_bytes == bytes_ && info.piece_bytes <= bytes_ - received_,
                 "ring: ", prev_name_, " sent ", info.message_bytes, " bytes for ", describe_tag(info.tag),
                 ", but this rank (", rank_, ") expected ", bytes_, " bytes for ", describe_tag(tag_),
                 " -- do all ranks run the same collectives, in the same order, on tensors of the same size?");
  const uint8_t* piece = channel_->slots[tail % kSlots];
  if (into_ != nullptr) {
    std::memcpy(into_ + received_, piece, info.piece_bytes);
    piece = into_ + received_;
  }
  if (on_received_ != nullptr) (*on_received_)(piece, received_, info.piece_bytes);
  advance(channel_->tail, tail + 1, channel_->writer_sleeping);  // the slot may now be overwritten
  received_ += info.piece_bytes;
  return true;
}

void ShmRecv::wait_ready(std::chrono::microseconds timeout) {
  // Empty while head == tail, and only this side moves tail.
  sleep_while(channel_->head, channel_->tail.load(std::memory_order_relaxed), channel_->reader_sleeping, timeout);
}

void ShmRecv::check(bool timed_out, bool busy) {
  check_not_aborted(channel_, tag_);
  if (busy) check_peer(prev_name_, prev_pid_, timed_out, tag_, /*receiving=*/true);
}

void ShmRecv::abort(const std::string& reason) { set_abort(channel_, rank_, reason); }

// ---- sending -------------------------------------------------------------------------------------

ShmSend::ShmSend(Store& store, const std::string& keys, int rank, int next, const std::string& here)
    : rank_(rank), next_name_(peer_name(next, here)) {
  store.set(pid_key(keys, rank), std::to_string(::getpid()));
  const ChannelAddress address = parse_address(store.get_string(channel_key(keys, next)), next);
  // Opening /proc/<pid>/fd/<fd> opens the memory file itself. It needs the same user, a process that
  // may be inspected (not set-uid, not made undumpable) and one pid namespace, as ranks on one host
  // (host_identity()) are. The address comes from the store, so before anything is opened the link
  // must name one of our channels, and what is opened must be a sealed memory file of a channel's
  // size, owned by us, and published by the process that said it created it.
  RINGGRAD_CHECK(std::to_string(address.pid) == store.get_string(pid_key(keys, next)), "ring: rank ", next,
                 " published a shared-memory channel of another process (pid ", address.pid, ")");
  const std::string path = detail::str("/proc/", address.pid, "/fd/", address.fd);
  const std::string target = read_link(path.c_str());
  const std::string expected = detail::str("/memfd:", kChannelName, next, " (deleted)");
  RINGGRAD_CHECK(target == expected, "ring: cannot open ", next_name_, "'s shared-memory channel: ", path, " is ",
                 target.empty() ? std::string("not there (has it exited?)") : "'" + detail::printable(target) + "'",
                 target.empty() ? std::string(" -- are all ranks on this host run by one user, in one pid namespace? "
                                              "else use transport \"tcp\"")
                                : std::string());
  const int fd = ::open(path.c_str(), O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  const int open_error = errno;
  RINGGRAD_CHECK(fd >= 0, "ring: cannot open ", next_name_, "'s shared-memory channel ", path, ": ",
                 std::strerror(open_error),
                 open_error == ENOENT ? detail::str(" (has ", next_name_, " exited?)")
                                      : std::string(" (are all ranks on this host run by one user, and may be "
                                                    "inspected: not set-uid? else use transport \"tcp\")"));
  struct stat info {};
  const bool fits = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_uid == ::geteuid() &&
                    info.st_size == static_cast<off_t>(sizeof(ShmChannel)) &&
                    (::fcntl(fd, F_GET_SEALS) & kChannelSeals) == kChannelSeals;
  if (!fits) ::close(fd);
  RINGGRAD_CHECK(fits, "ring: ", path, " is not ", next_name_, "'s shared-memory channel (has it exited?)");
  try {
    channel_ = map_channel(fd, path.c_str());
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);  // the mapping keeps the memory
  try {
    RINGGRAD_CHECK(channel_->cookie == address.cookie, "ring: ", path, " is not ", next_name_,
                   "'s shared-memory channel (has it exited?)");
    next_pid_ = std::stoi(store.get_string(pid_key(keys, next)));
    store.set(mapped_key(keys, rank), "1");
  } catch (...) {
    ::munmap(channel_, sizeof(ShmChannel));
    throw;
  }
}

ShmSend::~ShmSend() { ::munmap(channel_, sizeof(ShmChannel)); }

void ShmSend::begin(uint64_t tag, const void* data, size_t bytes) {
  tag_ = tag;
  data_ = static_cast<const uint8_t*>(data);
  bytes_ = bytes;
  sent_ = 0;
}

bool ShmSend::progress() {
  const uint32_t head = channel_->head.load(std::memory_order_relaxed);
  if (head - channel_->tail.load(std::memory_order_acquire) >= static_cast<uint32_t>(kSlots)) return false;  // full
  const size_t piece = std::min(kSlotBytes, bytes_ - sent_);
  std::memcpy(channel_->slots[head % kSlots], data_ + sent_, piece);
  channel_->info[head % kSlots] = {tag_, bytes_, piece};
  advance(channel_->head, head + 1, channel_->reader_sleeping);  // publishes the slot's bytes and info
  sent_ += piece;
  return true;
}

void ShmSend::wait_ready(std::chrono::microseconds timeout) {
  // Full while tail == head - kSlots, and only this side moves head.
  const uint32_t full_at = channel_->head.load(std::memory_order_relaxed) - static_cast<uint32_t>(kSlots);
  sleep_while(channel_->tail, full_at, channel_->writer_sleeping, timeout);
}

void ShmSend::check(bool timed_out, bool busy) {
  check_not_aborted(channel_, tag_);
  if (busy) check_peer(next_name_, next_pid_, timed_out, tag_, /*receiving=*/false);
}

void ShmSend::abort(const std::string& reason) { set_abort(channel_, rank_, reason); }

}  // namespace parallel
}  // namespace ringgrad
