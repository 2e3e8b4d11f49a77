// kernels/cpu/thread_pool.cpp: sleeping helper threads that claim parts of a job.
//
// A job is a counter of parts. The caller posts one wake-up per helper its thread share allows
// (kernel_threads() - 1, fewer for fewer parts), then claims parts itself; each woken helper claims
// unclaimed parts, one at a time, until none is left. Claiming is one atomic
// increment, so a part is never run twice and a slow helper never delays the caller: whatever is
// unclaimed when the caller gets there, the caller runs.
#include "kernels/cpu/thread_pool.h"

#ifndef RINGGRAD_POOL_POLL_US
#define RINGGRAD_POOL_POLL_US 50
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ringgrad {
namespace kernels {
namespace cpu {
namespace {

// How long a thread that has just finished its share polls before it goes to sleep: the helper for
// the next job, the caller for the helpers' last parts. A sleep and a wake-up cost 10-50 us on a
// VM, twice per split (the helper is woken, then the caller), which is as long as an add of 1M
// floats takes on two cores; kernels often come in quick succession (an optimizer step, the ops of
// a backward), so a short poll usually catches the next one. Bounded, unlike OpenMP's spinning
// (see thread_pool.h): on a busy machine a poll costs at most this much of a core per split.
constexpr std::chrono::microseconds kPoll(RINGGRAD_POOL_POLL_US);

// Polls `done` until it holds or kPoll has passed; true when it holds.
template <typename Done>
bool poll_briefly(Done&& done) {
  if (kPoll.count() == 0) return done();
  const auto until = std::chrono::steady_clock::now() + kPoll;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();  // tells the core this is a wait loop: frees resources for its sibling
#endif
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

struct Job {
  explicit Job(int part_count, const std::function<void(int)>& part_fn) : parts(part_count), fn(part_fn) {}
  const int parts;
  const std::function<void(int)>& fn;  // lives on the caller's stack; only touched while a part runs
  std::atomic<int> next{0};            // next unclaimed part
  std::atomic<int> finished{0};
  std::mutex mutex;
  std::condition_variable all_done;
  std::exception_ptr error;

  // Claims and runs parts until none is left.
  void work() {
    for (int part; (part = next.fetch_add(1)) < parts;) {
      try {
        fn(part);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
      if (finished.fetch_add(1) + 1 == parts) {
        std::lock_guard<std::mutex> lock(mutex);
        all_done.notify_all();
      }
    }
  }
};

class Pool {
 public:
  Pool() {
    const int helpers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) - 1;  // a core count fits
    for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { loop(); });
  }
  // Never destroyed (see instance()), so helpers never race with static destruction at exit.

  void post(const std::shared_ptr<Job>& job, int wakeups) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int i = 0; i < wakeups; ++i) queue_.push_back(job);
      queued_.fetch_add(wakeups, std::memory_order_release);
    }
    if (wakeups == 1)
      wake_.notify_one();
    else
      wake_.notify_all();
  }

  static Pool& instance() {
    static Pool* pool = new Pool();
    return *pool;
  }

 private:
  void loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      poll_briefly([this] { return queued_.load(std::memory_order_acquire) > 0; });
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
        queued_.fetch_sub(1, std::memory_order_relaxed);
      }
      job->work();  // the shared_ptr keeps the counters alive even if the caller has returned
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::atomic<int> queued_{0};  // queue_.size(), readable without the mutex (by a polling helper)
  std::vector<std::thread> threads_;
};

thread_local int t_kernel_threads = 0;  // 0: not set on this thread, use every core

}  // namespace

int kernel_threads() {
  return t_kernel_threads > 0 ? t_kernel_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void set_kernel_threads(int threads) { t_kernel_threads = std::max(1, threads); }

void parallel_for(int parts, const std::function<void(int)>& fn) {
  if (parts <= 1) {
    if (parts == 1) fn(0);
    return;
  }
  // One wake-up per helper this thread's share allows: a woken helper claims parts until none is
  // left, so more wake-ups than helpers would only be popped and find nothing to do.
  auto job = std::make_shared<Job>(parts, fn);
  const int wakeups = std::min(parts, kernel_threads()) - 1;
  if (wakeups > 0) Pool::instance().post(job, wakeups);
  job->work();
  poll_briefly([&] { return job->finished.load(std::memory_order_acquire) == parts; });
  std::unique_lock<std::mutex> lock(job->mutex);
  job->all_done.wait(lock, [&] { return job->finished.load() == parts; });
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
