// tools/launch/rank_output.cpp: see rank_output.h.
#include "tools/launch/rank_output.h"

#include <unistd.h>

#include <cerrno>

namespace ringgrad::launch {

namespace {

// Queues every complete line in s.pending, prefixed; keeps a trailing incomplete line unless `flush`.
void emit_lines(RankStream& s, bool flush) {
  std::string text;
  size_t start = 0;
  for (size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1)
    text += s.prefix + s.pending.substr(start, nl - start + 1);
  s.pending.erase(0, start);
  if (!s.pending.empty() && (flush || s.pending.size() >= kMaxLineBytes)) {
    text += s.prefix + s.pending + '\n';
    s.pending.clear();
  }
  s.dest->push_lines(s.rank, text);
}

}  // namespace

void read_stream(RankStream& s, bool drain) {
  char buf[64 * 1024];
  bool eof = false;
  for (;;) {
    const ssize_t n = read(s.fd, buf, sizeof buf);
    if (n > 0) {
      s.pending.append(buf, static_cast<size_t>(n));
      if (drain) continue;
      break;
    }
    if (n < 0 && errno == EINTR) continue;
    eof = !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));  // 0 is end of file; other errors end it too
    break;
  }
  emit_lines(s, /*flush=*/eof || drain);
  if (eof || drain) {
    close(s.fd);
    s.fd = -1;
  }
}

}  // namespace ringgrad::launch
