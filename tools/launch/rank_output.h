// tools/launch/rank_output.h: one output stream of a rank, read from its pipe and written on the
// launcher's own stream one whole line at a time, each line prefixed with "[rank k] ".
#pragma once

#include <string>

namespace ringgrad::launch {

// A line longer than this is printed in pieces: a rank drawing a progress bar with '\r' never ends
// its line, and the launcher must not hold its output back forever.
constexpr size_t kMaxLineBytes = 64 * 1024;

struct RankStream {
  int fd = -1;          // the read end of the rank's pipe; -1 once closed
  int dest_fd = 1;      // where its lines go: 1 or 2
  std::string prefix;   // "[rank k] "
  std::string pending;  // the bytes of a line not yet complete
};

// Reads what the pipe holds: one read() per wake-up, so a chatty rank cannot starve the others, or
// until it is empty when `drain`. Prints the complete lines. At end of file (or after a drain)
// prints what is left as a line of its own and closes the pipe.
void read_stream(RankStream& s, bool drain);

// Writes all of `text`, retrying short writes; gives up quietly when the reader has gone away.
void write_all(int fd, const std::string& text);

}  // namespace ringgrad::launch
