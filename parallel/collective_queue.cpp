// parallel/collective_queue.cpp: the communication thread of collective_queue.h.
#include "parallel/collective_queue.h"

#include <utility>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/base/error.h>
#include "parallel/collective_args.h"

namespace ringgrad {
namespace parallel {

CollectiveQueue::CollectiveQueue(const ProcessGroup& group, Hooks hooks) : group_(group), hooks_(std::move(hooks)) {
  thread_ = std::thread([this] { loop(); });
}

CollectiveQueue::~CollectiveQueue() { stop(); }

void CollectiveQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string CollectiveQueue::broken() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return broken_;
}

std::shared_ptr<Work> CollectiveQueue::enqueue(std::string description, std::function<void(const CollectiveRun&)> run) {
  auto work = std::make_shared<Work>(std::move(description));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    RINGGRAD_CHECK(!stopping_, hooks_.message_prefix, work->description(), ": the process group is being destroyed");
    queue_.push_back({work, std::move(run)});
  }
  wake_.notify_all();
  // Let the communication thread start now rather than at the scheduler's next tick: when compute
  // threads fill every core (DDP's backward), a woken thread can otherwise wait milliseconds for
  // one, and the all-reduce that should overlap backward starts only after it.
  std::this_thread::yield();
  return work;
}

void CollectiveQueue::loop() {
  NoGradGuard no_grad;  // results written into tensors (parameters, too) are not part of any graph
  if (hooks_.on_thread_start) hooks_.on_thread_start();
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job.work->mark_started();
    CollectiveRun run;
    run.number = ++collectives_;
    run.timeout = group_.timeout();
    run.deadline = std::chrono::steady_clock::now() + run.timeout;
    const std::string broken = this->broken();
    // The job's captures go before its Work is done (see the top of collective_queue.h).
    if (!broken.empty()) {
      job.run = nullptr;
      job.work->mark_done(std::make_exception_ptr(
          Error(hooks_.message_prefix + broken_group_message(job.work->description(), group_.rank(), broken))));
      continue;
    }
    try {
      job.run(run);
      job.run = nullptr;
      job.work->mark_done();
    } catch (const std::exception& e) {
      const std::string message = hooks_.failure_message(job.work->description(), e);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        broken_ = message;
      }
      hooks_.abort(e.what());
      job.run = nullptr;
      job.work->mark_done(std::make_exception_ptr(Error(message)));
    }
  }
}

}  // namespace parallel
}  // namespace ringgrad
