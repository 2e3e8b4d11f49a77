// examples/progress.h: a progress line inside a long loop, so that a 30-second epoch does not look
// like a hung program.
//
//   Progress progress(stdout);
//   progress.start("epoch 2/4", train.num_batches());
//   while (...) { ...; progress.update(batches_done, mean_loss); }
//   progress.finish();   // before printing the epoch's own line
//
// Nothing is printed during the first `every_s` seconds, so short loops stay silent; after that one
// line every `every_s` seconds: "epoch 2/4: 180/469 batches, 5.1 s elapsed, loss 0.4100". On a
// terminal the line rewrites itself in place (\r) and finish() erases it; into a file or a pipe
// each one is a plain "# " comment line, which table readers skip.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace ringgrad::examples {

class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  // enabled = false makes every call a no-op (for example on the ranks of a job that do not print).
  explicit Progress(std::FILE* out, bool enabled = true, double every_s = 5.0)
      : out_(out), enabled_(enabled), every_s_(every_s), terminal_(::isatty(::fileno(out)) == 1) {}

  void start(std::string label, int64_t total) {
    label_ = std::move(label);
    total_ = total;
    start_ = last_ = Clock::now();
    printed_ = false;
  }

  void update(int64_t done, double loss) {
    if (!enabled_) return;
    const Clock::time_point now = Clock::now();
    if (std::chrono::duration<double>(now - last_).count() < every_s_) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    std::fprintf(out_, "%s%s: %lld/%lld batches, %.1f s elapsed, loss %.4f%s", terminal_ ? "\r" : "# ", label_.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), elapsed, loss,
                 terminal_ ? "\033[K" : "\n");
    std::fflush(out_);
    printed_ = true;
  }

  // Erases the in-place line on a terminal, so the next line starts clean.
  void finish() {
    if (enabled_ && terminal_ && printed_) std::fputs("\r\033[K", out_);
    printed_ = false;
  }

 private:
  std::FILE* out_;
  bool enabled_;
  double every_s_;
  bool terminal_;
  std::string label_;
  int64_t total_ = 0;
  Clock::time_point start_, last_;
  bool printed_ = false;
};

}  // namespace ringgrad::examples
