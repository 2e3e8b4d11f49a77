// tools/launch/rank_output.h: one output stream of a rank, read from its pipe and queued for the
// launcher's own stream one whole line at a time, each line prefixed with "[rank k] ".
#pragma once

#include <string>

#include "tools/launch/output_queue.h"

namespace ringgrad::launch {

// A line longer than this is printed in pieces: a rank drawing a progress bar with '\r' never ends
// its line, and the launcher must not hold its output back forever.
constexpr size_t kMaxLineBytes = 64 * 1024;

struct RankStream {
  int fd = -1;                  // the read end of the rank's pipe; -1 once closed
  OutputQueue* dest = nullptr;  // where its lines go: the launcher's stdout or stderr
  int rank = 0;                 // whose lines they are, for a notice of dropped ones
  std::string prefix;           // "[rank k] "
  std::string pending;          // the bytes of a line not yet complete
};

// Reads what the pipe holds: one read() per wake-up, so a chatty rank cannot starve the others, or
// until it is empty when `drain`. Queues the complete lines. At end of file (or after a drain)
// queues what is left as a line of its own and closes the pipe.
void read_stream(RankStream& s, bool drain);

}  // namespace ringgrad::launch
