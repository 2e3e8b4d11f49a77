// tools/launch/output_queue.h: the launcher's stdout or stderr as a queue that never blocks it.
//
// A reader that stops reading -- `ringrun ... | less` paused, a terminal stopped with Ctrl-S, a
// stalled ssh session -- must not stop the launcher: it still has to act on signals, notice a
// failed rank and stop the others, and read the ranks' pipes so that they do not block on their
// own writes. So the ranks' lines and the launcher's own messages wait here, and the launcher's
// one poll() loop writes what the destination takes whenever it is ready (poll_fd(), POLLOUT).
//
// Writing without blocking, without touching the file's shared flags: O_NONBLOCK on fd 1 would
// change the open file description it shares with the shell -- on a terminal, fds 0, 1 and 2 are
// usually one -- and, left set by a launcher killed by SIGKILL, make the shell's reads fail. Instead a pipe or a
// terminal is opened again through /proc/self/fd (a description of our own, the same pipe or terminal) with O_NONBLOCK;
// a socket is written with send(MSG_DONTWAIT); a regular file or /dev/null never waits for a reader, and is written as
// it is. Where /proc cannot be opened, at most PIPE_BUF bytes are written each time poll() says the destination is
// ready, which a pipe takes without blocking.
//
// The queue holds at most kMaxQueuedBytes of the ranks' lines. Past that the oldest whole lines are
// dropped -- the newest are kept, a failing rank's last words among them -- and where they were,
// the reader gets one line instead:
//   ringrun: dropped 1200 lines (130800 bytes) of output the reader did not take in time (rank 0:
//   700 lines, rank 1: 500 lines)                                                   (one line)
// The launcher's own messages are never dropped. Bytes go out in order, so a line is never torn:
// what a write leaves over goes first the next time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <string>

namespace ringgrad::launch {

// Thousands of screens of output, and little memory even with stdout and stderr both full.
constexpr size_t kMaxQueuedBytes = 4 << 20;

class OutputQueue {
 public:
  // Writes to `fd` (1 or 2); `name` starts the launcher's notice of dropped lines.
  OutputQueue(int fd, std::string name);
  ~OutputQueue();
  OutputQueue(const OutputQueue&) = delete;
  OutputQueue& operator=(const OutputQueue&) = delete;

  // Whether fds a and b are the same pipe, terminal or socket (`2>&1`, or both on a terminal):
  // then one queue must take both streams, or a line of one could land inside a line of the other
  // when a write goes out in parts. (A regular file takes every write whole.)
  static bool shares_destination(int a, int b);

  // Whole lines of rank `rank`, each ending in '\n'.
  void push_lines(int rank, const std::string& text);
  // A message of the launcher's own, never dropped.
  void push_message(const std::string& text);

  // Whether there is something to write, and the reader has not gone away.
  bool waiting() const { return !chunks_.empty(); }
  // What to poll for POLLOUT while waiting(); -1 while a write that found the destination busy
  // despite POLLOUT backs off (a terminal may say so), until retry_at().
  int poll_fd() const;
  std::chrono::steady_clock::time_point retry_at() const { return retry_at_; }

  // Writes what the destination takes now, in order; returns whether it took anything. Returns at
  // once when a signal interrupts the write: the loop acts on it first (SIGTTOU: a background
  // launcher writing to the terminal). A reader gone (EPIPE, or any other error) empties the
  // queue for good: the ranks run to their end, as they would with their output on /dev/null.
  bool write_some();

 private:
  enum class Kind { Lines, Message, Gap };
  struct Chunk {
    Kind kind = Kind::Lines;
    int rank = -1;                        // Lines: whose
    std::string text;                     // a Gap's is written when the Gap reaches the front
    size_t lines = 0;                     // Lines: how many
    std::map<int, size_t> dropped_lines;  // Gap: by rank
    size_t dropped_bytes = 0;             // Gap
  };
  enum class How { Write, Send, PipeBufAtATime };

  bool drop_oldest();
  std::string gap_notice(const Chunk& gap) const;
  ssize_t write_once(const char* data, size_t size);

  std::string name_;
  int fd_;  // what is written to: fd 1 or 2, or the description opened again
  bool own_fd_ = false;
  bool gone_ = false;  // the reader went away: nothing is queued any more
  How how_ = How::Write;
  std::deque<Chunk> chunks_;
  size_t front_written_ = 0;  // bytes of the front chunk already written (it is never dropped)
  size_t queued_bytes_ = 0;   // of Lines chunks, the part the bound counts
  std::chrono::steady_clock::time_point retry_at_{};
};

}  // namespace ringgrad::launch
