// tests/cuda_emu/src/streams.cpp: streams and events of the emulated runtime, as queues of work.
//
// On a GPU, a call that queues work (a launch, cudaMemcpyAsync, a memset, a cuBLAS call, an event
// record, cudaStreamWaitEvent) returns before the work runs, and the work of different streams runs
// in any order that respects their events. Code that forgets a wait is right on most runs and
// wrong on some. Here each stream is a FIFO queue, and RINGGRAD_EMU_STREAMS says when its work runs:
//
//   eager          when it is queued (work never waits: a missing wait is invisible)
//   lazy           only when something forces it: a synchronize (stream, event, device), a
//                  blocking copy, cudaFree, a query of work not yet done (which answers "not
//                  ready" first), or a stream that waits for it -- the latest a GPU could run it
//   random[:SEED]  as lazy, and at every runtime call a random stream runs a random prefix of its
//                  queue, so work lands early, late or in between
//
// A wait is an entry in the waiting stream's queue that runs the other stream up to the recorded
// point first. A chain of streams that wait for each other in a circle would hang a GPU; here it
// stops the program naming the streams. The legacy stream (null) of a device waits for every
// blocking stream of that device and they wait for it, as CUDA's legacy default stream does;
// ringgrad's own streams are non-blocking, so a blocking cudaMemcpy does not wait for them.
//
// The same waits, records and synchronisations carry the vector clocks of the happens-before
// checker (races.h): each queue's clock is what is known to happen before its next operation, each
// recorded event keeps its stream's clock, and the host's clock is what it knows is done.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emu/control.h"
#include "cuda_emu/runtime_api.h"
#include "races.h"
#include "state.h"
#include "streams.h"

namespace cuda_emu {
namespace {

struct Queue;

struct Op {
  std::string what;
  std::function<bool()> work;    // one step; true once done. Empty for a wait
  std::shared_ptr<Queue> waits;  // a wait: run this stream up to `until` first
  uint64_t until = 0;
};

struct Queue {
  int device = 0;
  bool blocking = true;  // false: created with cudaStreamNonBlocking
  bool legacy = false;   // the null stream of `device`
  uint64_t id = 0;       // for messages: "stream 3 of cuda:0"
  uint64_t agent = 0;    // its entry in vector clocks: unique among every queue ever made, legacy ones too
  VectorClock clock;     // the operations known to happen before its next one (its own included)
  std::deque<Op> pending;
  uint64_t queued = 0, done = 0;  // operations ever queued, ever run
};

std::string name_of(const Queue& q) {
  return (q.legacy ? std::string("the legacy stream") : "stream " + std::to_string(q.id)) +
         " of cuda:" + std::to_string(q.device);
}

// A recorded event: the point `seq` of `queue`, reached when queue->done >= seq.
struct EventPoint {
  std::shared_ptr<Queue> queue;
  uint64_t seq = 0;
  VectorClock clock;  // the queue's clock at the record
  double ms = 0;      // host time when the record ran
};

}  // namespace
}  // namespace cuda_emu

struct CUstream_st {
  std::shared_ptr<cuda_emu::Queue> queue;
};

struct CUevent_st {
  int device;
  unsigned flags;
  std::shared_ptr<cuda_emu::EventPoint> point;  // null until recorded
};

namespace cuda_emu {
namespace {

// One lock for every queue: work runs with it held, so the emulated GPU runs one operation at a time,
// whichever host thread made it run. Recursive: draining one stream drains those it waits for.
// Never destroyed: a program may use streams during static destruction (a process group destroyed at
// exit), after statics of this file would be gone.
std::recursive_mutex g_mutex;
std::set<const CUstream_st*>& g_streams = *new std::set<const CUstream_st*>();
std::set<const CUevent_st*>& g_events = *new std::set<const CUevent_st*>();
std::vector<std::shared_ptr<Queue>>& g_queues = *new std::vector<std::shared_ptr<Queue>>();  // legacy ones included
std::shared_ptr<Queue>* g_legacy = new std::shared_ptr<Queue>[16];
uint64_t g_next_id = 1;
uint64_t g_next_agent = 1;
VectorClock& g_host = *new VectorClock();  // what the host knows is done (races.h)
std::mt19937_64 g_rng;

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

const StreamSettings& settings() {
  static const StreamSettings s = [] {
    const char* env = std::getenv("RINGGRAD_EMU_STREAMS");
    try {
      return parse_stream_settings(env != nullptr ? env : "");
    } catch (const std::invalid_argument& e) {
      fatal(e.what());
    }
  }();
  return s;
}

std::shared_ptr<Queue> legacy_queue(int device) {
  std::shared_ptr<Queue>& q = g_legacy[device];
  if (!q) {
    q = std::make_shared<Queue>();
    q->device = device;
    q->legacy = true;
    q->agent = g_next_agent++;
    g_queues.push_back(q);
  }
  return q;
}

// With g_mutex held. The queue of a live stream (null: the current device's legacy stream), or null.
std::shared_ptr<Queue> queue_of(cudaStream_t stream) {
  if (stream == nullptr) return legacy_queue(current_device());
  return g_streams.count(stream) != 0 ? stream->queue : nullptr;
}

// With g_mutex held. Runs `q` until it has run `seq` operations, or until an operation cannot finish
// yet (returns false: the stream is stuck in it for now); `chain` holds the streams whose waits led
// here, so that a circle of waits is found instead of recursing forever.
bool run_until(const std::shared_ptr<Queue>& q, uint64_t seq, std::vector<const Queue*>& chain) {
  if (q->done >= seq) return true;
  if (std::find(chain.begin(), chain.end(), q.get()) != chain.end()) {
    std::string circle;
    for (const Queue* c : chain) circle += name_of(*c) + " waits for ";
    fatal("streams wait for each other: " + circle + name_of(*q) + " (a GPU would hang here)");
  }
  chain.push_back(q.get());
  bool reached = true;
  while (q->done < seq) {
    Op& op = q->pending.front();
    const bool finished = op.waits ? run_until(op.waits, op.until, chain) : !op.work || op.work();
    if (!finished) {
      reached = false;
      break;
    }
    q->pending.pop_front();
    ++q->done;
  }
  chain.pop_back();
  return reached;
}

bool run_all(const std::shared_ptr<Queue>& q) {
  std::vector<const Queue*> chain;
  return run_until(q, q->queued, chain);
}

double hang_seconds() {
  static const double seconds = [] {
    const char* env = std::getenv("RINGGRAD_EMU_HANG_S");
    const double s = env != nullptr && *env != '\0' ? std::strtod(env, nullptr) : 600.0;
    if (!(s > 0)) fatal("RINGGRAD_EMU_HANG_S: expected a positive number of seconds, got '" + std::string(env) + "'");
    return s;
  }();
  return seconds;
}

// Runs `reached()` (which runs queues with g_mutex held) until it returns true; between tries the
// lock is released, so that the host threads that will unblock the step (an NCCL peer in this
// process) can queue and run their work.
template <typename Reached>
void wait_until(std::unique_lock<std::recursive_mutex>& lock, const std::shared_ptr<Queue>& q, Reached reached) {
  const auto start = std::chrono::steady_clock::now();
  while (!reached()) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    lock.lock();
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(hang_seconds()))
      fatal("the host has waited " + std::to_string(static_cast<int>(hang_seconds())) + " s for " + name_of(*q) +
            ", stuck in " + (q->pending.empty() ? std::string("nothing") : q->pending.front().what) +
            " (RINGGRAD_EMU_HANG_S): a GPU would hang here");
  }
}

void push(const std::shared_ptr<Queue>& q, Op op) {
  q->pending.push_back(std::move(op));
  ++q->queued;
}

// With g_mutex held. Queues a wait on `q` for `other` up to `until`, whose clock there is `clock`.
void push_wait(const std::shared_ptr<Queue>& q, const std::string& what, const std::shared_ptr<Queue>& other,
               uint64_t until, const VectorClock& clock) {
  q->clock.join(clock);
  push(q, Op{what, nullptr, other, until});
}

// With g_mutex held. Queues work on `q`: it comes after everything the host knows is done, and
// after what `q` waited for; the checker sees its accesses with that clock.
void push_work(const std::shared_ptr<Queue>& q, const std::string& what, std::function<bool()> step,
               const std::vector<MemoryAccess>& accesses) {
  q->clock.join(g_host);
  q->clock.tick(q->agent);
  check_accesses(accesses, q->agent, q->clock, what + " on " + name_of(*q));
  push(q, Op{what, std::move(step), nullptr, 0});
}

// With g_mutex held, once everything queued on `q` so far has run: the host knows it.
void host_saw_done(const Queue& q) { g_host.join(q.clock); }

// With g_mutex held. What a call that queues work or asks about it does to the queues afterwards:
// eager runs `q` at once; random runs a random prefix of a random stream.
void after_call(const std::shared_ptr<Queue>& q) {
  const StreamSettings& s = settings();
  if (s.mode == StreamMode::Eager) {
    if (q) run_all(q);
    return;
  }
  if (s.mode != StreamMode::Random) return;
  static bool seeded = false;
  if (!seeded) g_rng.seed(s.seed), seeded = true;
  std::vector<std::shared_ptr<Queue>> busy;
  for (const auto& c : g_queues)
    if (c->done < c->queued) busy.push_back(c);
  if (busy.empty() || g_rng() % 2 == 0) return;
  const std::shared_ptr<Queue>& pick = busy[g_rng() % busy.size()];
  std::vector<const Queue*> chain;
  run_until(pick, pick->done + 1 + g_rng() % (pick->queued - pick->done), chain);
}

// With g_mutex held. The waits that CUDA's legacy stream semantics add before an operation on `q`:
// the legacy stream waits for every blocking stream of its device, and a blocking stream for it.
void legacy_waits(const std::shared_ptr<Queue>& q) {
  if (!q->blocking) return;
  for (const auto& other : g_queues) {
    if (other == q || other->device != q->device || !other->blocking || (!q->legacy && !other->legacy)) continue;
    if (other->queued > 0) push_wait(q, "a wait for " + name_of(*other), other, other->queued, other->clock);
  }
}

}  // namespace

StreamSettings parse_stream_settings(const std::string& text) {
  StreamSettings s;
  if (text.empty() || text == "eager") return s;
  if (text == "lazy") {
    s.mode = StreamMode::Lazy;
    return s;
  }
  if (parse_random(text, &s.seed)) {
    s.mode = StreamMode::Random;
    return s;
  }
  throw std::invalid_argument("RINGGRAD_EMU_STREAMS: expected eager, lazy, random or random:SEED, got '" + text + "'");
}

StreamSettings stream_settings() { return settings(); }

bool stream_device(cudaStream_t stream, int* device) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  const std::shared_ptr<Queue> q = queue_of(stream);
  if (!q) return false;
  *device = q->device;
  return true;
}

void enqueue_steps(cudaStream_t stream, const std::string& what, std::function<bool()> step,
                   const std::vector<MemoryAccess>& accesses) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  const std::shared_ptr<Queue> q = queue_of(stream);
  if (!q) fatal(what + " queued on a stream that does not exist");
  legacy_waits(q);
  push_work(q, what, std::move(step), accesses);
  after_call(q);
}

void enqueue(cudaStream_t stream, const std::string& what, std::function<void()> work,
             const std::vector<MemoryAccess>& accesses) {
  enqueue_steps(
      stream, what,
      [work = std::move(work)] {
        work();
        return true;
      },
      accesses);
}

void drain_stream(cudaStream_t stream) {
  std::unique_lock<std::recursive_mutex> lock(g_mutex);
  if (const std::shared_ptr<Queue> q = queue_of(stream)) {
    wait_until(lock, q, [&] { return run_all(q); });
    host_saw_done(*q);
  }
}

void drain_all() {
  std::unique_lock<std::recursive_mutex> lock(g_mutex);
  const std::vector<std::shared_ptr<Queue>> queues = g_queues;
  for (const auto& q : queues) {
    wait_until(lock, q, [&] { return run_all(q); });
    host_saw_done(*q);
  }
}

}  // namespace cuda_emu

using namespace cuda_emu;

// ---- streams ------------------------------------------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = use_context("cudaStreamCreate"); e != cudaSuccess) return e;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto q = std::make_shared<Queue>();
  q->device = current_device();
  q->blocking = (flags & cudaStreamNonBlocking) == 0;
  q->id = g_next_id++;
  q->agent = g_next_agent++;
  g_queues.push_back(q);
  auto* s = new CUstream_st{q};
  g_streams.insert(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::unique_lock<std::recursive_mutex> lock(g_mutex);
  if (stream == nullptr || g_streams.count(stream) == 0) return fail(cudaErrorInvalidResourceHandle);
  // A GPU finishes what was queued, then frees the stream; events recorded on it keep its queue.
  if (!run_all(stream->queue)) {
    lock.unlock();
    drain_stream(stream);
    lock.lock();
  }
  g_streams.erase(stream);
  g_queues.erase(std::find(g_queues.begin(), g_queues.end(), stream->queue));
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (const cudaError_t e = use_context("cudaStreamSynchronize"); e != cudaSuccess) return e;
  std::unique_lock<std::recursive_mutex> lock(g_mutex);
  const std::shared_ptr<Queue> q = queue_of(stream);
  if (!q) return fail(cudaErrorInvalidResourceHandle);
  wait_until(lock, q, [&] { return run_all(q); });
  host_saw_done(*q);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (const cudaError_t e = use_context("cudaStreamQuery"); e != cudaSuccess) return e;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  const std::shared_ptr<Queue> q = queue_of(stream);
  if (!q) return fail(cudaErrorInvalidResourceHandle);
  if (q->done == q->queued) {
    host_saw_done(*q);
    return cudaSuccess;
  }
  run_all(q);  // not done now; done by the next question (a poll loop must end), unless stuck
  return cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  if (const cudaError_t e = use_context("cudaStreamWaitEvent"); e != cudaSuccess) return e;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  const std::shared_ptr<Queue> q = queue_of(stream);
  if (!q || event == nullptr || g_events.count(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  if (flags != 0) return fail(cudaErrorInvalidValue);
  // The wait is for the event's latest record at the time of this call; a never-recorded event is
  // complete. Either way a later record of the same event changes nothing for this wait.
  if (event->point) {
    legacy_waits(q);
    push_wait(q, "a wait for an event", event->point->queue, event->point->seq, event->point->clock);
  }
  after_call(q);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t e = use_context("cudaDeviceSynchronize"); e != cudaSuccess) return e;
  std::unique_lock<std::recursive_mutex> lock(g_mutex);
  const std::vector<std::shared_ptr<Queue>> queues = g_queues;
  for (const auto& q : queues) {
    if (q->device != current_device()) continue;
    wait_until(lock, q, [&] { return run_all(q); });
    host_saw_done(*q);
  }
  return cudaSuccess;
}

// ---- events -----------------------------------------------------------------------------------------------
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (event == nullptr || (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming)) != 0)
    return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = use_context("cudaEventCreate"); e != cudaSuccess) return e;
  auto* e = new CUevent_st{current_device(), flags, nullptr};
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  g_events.insert(e);
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (event == nullptr || g_events.erase(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  delete event;  // queued records and waits hold the recorded point, not the event
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (const cudaError_t e = use_context("cudaEventRecord"); e != cudaSuccess) return e;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  const std::shared_ptr<Queue> q = queue_of(stream);
  if (event == nullptr || g_events.count(event) == 0 || !q) return fail(cudaErrorInvalidResourceHandle);
  if (q->device != event->device)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: an event of cuda:" + std::to_string(event->device) +
                                                    " recorded on a stream of cuda:" + std::to_string(q->device));
  legacy_waits(q);
  auto point = std::make_shared<EventPoint>();
  point->queue = q;
  point->seq = q->queued + 1;
  push_work(q, "an event record",
            [point] {
              point->ms = now_ms();
              return true;
            },
            {});
  point->clock = q->clock;
  event->point = std::move(point);
  after_call(q);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (const cudaError_t e = use_context("cudaEventQuery"); e != cudaSuccess) return e;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (event == nullptr || g_events.count(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  const std::shared_ptr<EventPoint> p = event->point;
  if (!p) return cudaSuccess;
  if (p->queue->done >= p->seq) {
    g_host.join(p->clock);
    return cudaSuccess;
  }
  std::vector<const Queue*> chain;
  run_until(p->queue, p->seq, chain);  // not done now; done by the next question, unless stuck
  return cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::unique_lock<std::recursive_mutex> lock(g_mutex);
  if (event == nullptr || g_events.count(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  if (const std::shared_ptr<EventPoint> p = event->point) {
    wait_until(lock, p->queue, [&] {
      std::vector<const Queue*> chain;
      return run_until(p->queue, p->seq, chain);
    });
    g_host.join(p->clock);
  }
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (start == nullptr || end == nullptr || g_events.count(start) == 0 || g_events.count(end) == 0)
    return fail(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (!start->point || !end->point) return fail(cudaErrorInvalidResourceHandle);
  if (start->point->queue->done < start->point->seq || end->point->queue->done < end->point->seq)
    return fail(cudaErrorNotReady);
  *ms = static_cast<float>(end->point->ms - start->point->ms);
  return cudaSuccess;
}
