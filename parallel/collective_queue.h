// parallel/collective_queue.h: the communication thread of the backends that move host memory
// themselves ("ring", "gloo"; NCCL queues on a GPU stream instead).
//
// Collectives are checked on the caller's thread (collective_args.h), then queued here; one thread
// runs them one after another in launch order -- the same order on every rank, which is what lets the
// ranks' messages (and Gloo's tags) match up. The caller gets a Work at once and keeps computing: DDP
// launches a bucket's all-reduce this way while backward goes on.
//
// What a Work means is decided here, once, for every backend that uses the queue:
//   - it is started when the thread takes it, and its deadline (the group's timeout, read then) runs
//     from that moment, not from the launch;
//   - it is done when the collective returned, or failed with the collective's error;
//   - the tensors the collective's function captured are released before the Work is marked done
//     (once it is, the waiter may return from main, and exit handlers tear down what a late
//     destructor on this thread would still touch);
//   - a failure leaves the group broken: the backend's abort() tells the peers at once, and every
//     later collective fails at once with the first failure (broken_group_message), as an aborted
//     NCCL communicator does. Create a new group to go on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <ringgrad/parallel/process_group.h>

namespace ringgrad {
namespace parallel {

// What a queued collective gets when it runs.
struct CollectiveRun {
  uint64_t number = 0;  // 1, 2, ...: the same on every rank for the same collective
  std::chrono::milliseconds timeout{0};
  std::chrono::steady_clock::time_point deadline;  // now + timeout, when it started
};

class CollectiveQueue {
 public:
  // What a backend adds to the queue's own handling.
  struct Hooks {
    std::string message_prefix;             // starts the queue's own messages ("gloo " names Gloo's)
    std::function<void()> on_thread_start;  // on the thread, before the first collective; may be empty
    // The message a failed collective's Work gets, from the collective's description and its error.
    std::function<std::string(const std::string& description, const std::exception& error)> failure_message;
    // After a failure: close this rank's connections, so that every peer waiting for it fails now
    // instead of at its deadline.
    std::function<void(const std::string& error)> abort;
  };

  // Starts the thread. `group` gives the rank (for messages) and the timeout; it must outlive the queue.
  CollectiveQueue(const ProcessGroup& group, Hooks hooks);
  ~CollectiveQueue();  // stop()
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  // Queues `run` behind every collective queued before; `description` names it in messages.
  std::shared_ptr<Work> enqueue(std::string description, std::function<void(const CollectiveRun&)> run);
  // Runs what is queued, then ends the thread. Call it before the backend frees what the queued
  // collectives use (its connections).
  void stop();
  // The first failure's message; empty while the group works.
  std::string broken() const;

 private:
  struct Job {
    std::shared_ptr<Work> work;
    std::function<void(const CollectiveRun&)> run;
  };
  void loop();

  const ProcessGroup& group_;
  Hooks hooks_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::string broken_;
  uint64_t collectives_ = 0;  // the thread's
  std::thread thread_;
};

}  // namespace parallel
}  // namespace ringgrad
