// tools/launch/output_queue.cpp: see output_queue.h.
#include "tools/launch/output_queue.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace ringgrad::launch {

namespace {

using Clock = std::chrono::steady_clock;

// Consecutive lines of one rank share a chunk up to this size: fewer allocations for a rank that
// writes a line at a time, and dropping stays fine-grained.
constexpr size_t kChunkBytes = 64 * 1024;

// At most this many ranks are named in a notice of dropped lines; the rest are counted.
constexpr size_t kNamedRanks = 8;

}  // namespace

OutputQueue::OutputQueue(int fd, std::string name) : name_(std::move(name)), fd_(fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return;  // closed: the first write fails, and the queue gives up
  if (S_ISSOCK(st.st_mode)) {
    how_ = How::Send;
  } else if (S_ISFIFO(st.st_mode) || isatty(fd)) {
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    const int again = open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (again >= 0) {
      fd_ = again;
      own_fd_ = true;
    } else {
      how_ = How::PipeBufAtATime;
    }
  }
}

OutputQueue::~OutputQueue() {
  if (own_fd_) close(fd_);
}

bool OutputQueue::shares_destination(int a, int b) {
  struct stat sa {};
  struct stat sb {};
  if (fstat(a, &sa) != 0 || fstat(b, &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && !S_ISREG(sa.st_mode);
}

void OutputQueue::push_lines(int rank, const std::string& text) {
  if (gone_ || text.empty()) return;
  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  Chunk* last = chunks_.empty() ? nullptr : &chunks_.back();
  const bool being_written = chunks_.size() == 1 && front_written_ > 0;
  if (last != nullptr && last->kind == Kind::Lines && last->rank == rank && !being_written &&
      last->text.size() + text.size() <= kChunkBytes) {
    last->text += text;
    last->lines += lines;
  } else {
    Chunk c;
    c.kind = Kind::Lines;
    c.rank = rank;
    c.text = text;
    c.lines = lines;
    chunks_.push_back(std::move(c));
  }
  queued_bytes_ += text.size();
  while (queued_bytes_ > kMaxQueuedBytes && drop_oldest()) {
  }
}

void OutputQueue::push_message(const std::string& text) {
  if (gone_ || text.empty()) return;
  Chunk c;
  c.kind = Kind::Message;
  c.text = text;
  chunks_.push_back(std::move(c));
}

// Drops the oldest chunk of lines not yet begun, into the gap just before it when there is one
// whose notice is not written yet, or into a new gap in its place. False when there is none.
bool OutputQueue::drop_oldest() {
  size_t i = front_written_ > 0 ? 1 : 0;
  while (i < chunks_.size() && chunks_[i].kind != Kind::Lines) ++i;
  if (i == chunks_.size()) return false;
  const int rank = chunks_[i].rank;
  const size_t lines = chunks_[i].lines, bytes = chunks_[i].text.size();
  queued_bytes_ -= bytes;
  size_t gap = i;
  if (i > 0 && chunks_[i - 1].kind == Kind::Gap && chunks_[i - 1].text.empty()) {
    chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(i));
    gap = i - 1;
  } else {
    chunks_[i] = Chunk{};
    chunks_[i].kind = Kind::Gap;
  }
  chunks_[gap].dropped_lines[rank] += lines;
  chunks_[gap].dropped_bytes += bytes;
  return true;
}

// The line that stands in for a gap (output_queue.h has an example), ending in '\n'.
std::string OutputQueue::gap_notice(const Chunk& gap) const {
  size_t total = 0;
  for (const auto& [rank, lines] : gap.dropped_lines) total += lines;
  std::string text = name_ + ": dropped " + std::to_string(total) + " lines (" + std::to_string(gap.dropped_bytes) +
                     " bytes) of output the reader did not take in time (";
  size_t named = 0;
  for (const auto& [rank, lines] : gap.dropped_lines) {
    if (named == kNamedRanks) {
      text += ", and " + std::to_string(gap.dropped_lines.size() - named) + " more ranks";
      break;
    }
    text += (named++ > 0 ? ", rank " : "rank ") + std::to_string(rank) + ": " + std::to_string(lines) + " lines";
  }
  return text + ")\n";
}

int OutputQueue::poll_fd() const { return waiting() && Clock::now() >= retry_at_ ? fd_ : -1; }

ssize_t OutputQueue::write_once(const char* data, size_t size) {
  switch (how_) {
    case How::Send: return send(fd_, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    case How::PipeBufAtATime: return write(fd_, data, std::min<size_t>(size, PIPE_BUF));
    case How::Write: break;
  }
  return write(fd_, data, size);
}

bool OutputQueue::write_some() {
  bool took = false;
  while (!chunks_.empty()) {
    Chunk& c = chunks_.front();
    if (c.kind == Kind::Gap && c.text.empty()) c.text = gap_notice(c);  // from now on, drops make a new gap
    const ssize_t n = write_once(c.text.data() + front_written_, c.text.size() - front_written_);
    if (n > 0) {
      took = true;
      front_written_ += static_cast<size_t>(n);
      if (front_written_ == c.text.size()) {
        if (c.kind == Kind::Lines) queued_bytes_ -= c.text.size();
        chunks_.pop_front();
        front_written_ = 0;
      }
      if (how_ == How::PipeBufAtATime) break;  // poll() again before the next write
      continue;
    }
    if (n < 0 && errno == EINTR) break;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // poll() said ready, yet nothing went: back off a little rather than spin on it.
      if (!took) retry_at_ = Clock::now() + std::chrono::milliseconds(10);
      break;
    }
    // The reader went away (EPIPE: SIGPIPE is ignored), or the destination failed for good.
    chunks_.clear();
    front_written_ = 0;
    queued_bytes_ = 0;
    gone_ = true;
    break;
  }
  return took;
}

}  // namespace ringgrad::launch
