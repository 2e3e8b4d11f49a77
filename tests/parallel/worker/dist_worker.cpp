// tests/parallel/worker/dist_worker.cpp: one rank of a multi-process test (see test_ring.cpp).
//
//   RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p ringgrad_dist_worker SCENARIO [TRANSPORT]
//
// Each scenario runs collectives through init_process_group("ring") -- or the backend named by BACKEND
// ("gloo" say; default "ring") -- and checks the results against
// answers computed directly; it prints "ok" and exits 0, or prints what differed and exits 1. A
// collective that fails with an error exits 3 after printing "error: <message>", which the
// fault-injection tests expect from the survivors.
#include <ringgrad/ringgrad.h>

#include <ringgrad/core/base/fp16.h>
#include <ringgrad/parallel/rendezvous.h>
#include "parallel/ring/ring_process_group.h"
#include "parallel/ring/shm_link.h"
#include "parallel/socket.h"
#include <ringgrad/parallel/store.h>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace ringgrad;
using RedOp = parallel::ReduceOp;  // ringgrad::ReduceOp is the kernels' (sum/max over a dim)

namespace {

int g_failures = 0;

#define EXPECT(cond, ...)                                                                                          \
  do {                                                                                                             \
    if (!(cond)) {                                                                                                 \
      ++g_failures;                                                                                                \
      if (g_failures < 20) std::printf("rank %d: FAILED %s: %s\n", rank, #cond, detail::str(__VA_ARGS__).c_str()); \
    }                                                                                                              \
  } while (false)

uint16_t to_bf16(float f) {  // exact for the small integers used below
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Rank r's value at element i: small integers, so every sum is exact in any order and every dtype.
// They repeat every kPeriod elements, and so does every answer below: the checks of a million
// elements compare against tables of one period (the checks, not the collectives, were most of these
// tests' time, most of all under ThreadSanitizer).
constexpr int64_t kPeriod = 31;
double value(int r, int64_t i) { return static_cast<double>((i * 7 + r * 13) % kPeriod) - 8.0; }

Tensor filled(int r, int64_t n, DType dt) {
  Tensor t = empty({n}, dt);
  for (int64_t i = 0; i < std::min(n, kPeriod); ++i) {
    const double v = value(r, i);
    if (dt == DType::f32) static_cast<float*>(t.data())[i] = static_cast<float>(v);
    if (dt == DType::f64) static_cast<double*>(t.data())[i] = v;
    if (dt == DType::bf16) static_cast<uint16_t*>(t.data())[i] = to_bf16(static_cast<float>(v));
    if (dt == DType::f16) static_cast<uint16_t*>(t.data())[i] = float_to_fp16(static_cast<float>(v));
  }
  // The rest by doubling copies of whole periods: [0, done) is periodic, so it continues at `done`.
  auto* bytes = static_cast<uint8_t*>(t.data());
  const int64_t size = t.element_size();
  for (int64_t done = std::min(n, kPeriod); done < n;) {
    const int64_t count = std::min(done, n - done);
    std::memcpy(bytes + done * size, bytes, static_cast<size_t>(count * size));
    done += count;
  }
  return t;
}

double element(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::f32) return static_cast<const float*>(t.data())[i];
  if (t.dtype() == DType::f64) return static_cast<const double*>(t.data())[i];
  if (t.dtype() == DType::f16) return fp16_to_float(static_cast<const uint16_t*>(t.data())[i]);
  return from_bf16(static_cast<const uint16_t*>(t.data())[i]);
}

double expected(RedOp op, int world, int64_t i, DType dt) {
  double sum = 0, lo = 1e30, hi = -1e30;
  for (int r = 0; r < world; ++r) {
    sum += value(r, i);
    lo = std::min(lo, value(r, i));
    hi = std::max(hi, value(r, i));
  }
  switch (op) {
    case RedOp::Sum: return sum;
    case RedOp::Min: return lo;
    case RedOp::Max: return hi;
    case RedOp::Avg:
      // The ring divides in the tensor's dtype; so does the answer.
      if (dt == DType::f32) return static_cast<float>(sum) / static_cast<float>(world);
      if (dt == DType::bf16) return from_bf16(to_bf16(static_cast<float>(sum) / static_cast<float>(world)));
      // float16 holds these sums exactly (integers below 2048), so only the division rounds -- once,
      // to nearest even, as here.
      if (dt == DType::f16) return fp16_to_float(float_to_fp16(static_cast<float>(sum) / static_cast<float>(world)));
      return sum / world;
  }
  return 0;
}

// expected(op, world, i, dt) for i in [0, kPeriod): the answer at i is want[i % kPeriod].
std::vector<double> answers(RedOp op, int world, DType dt) {
  std::vector<double> want(kPeriod);
  for (int64_t i = 0; i < kPeriod; ++i) want[i] = expected(op, world, i, dt);
  return want;
}

bool close_enough(double got, double want, DType dt) {
  // bfloat16 keeps 8 significant bits: an average like 13/3 is rounded to nearest.
  return dt == DType::bf16 ? std::abs(got - want) <= std::abs(want) * (1.0 / 128) : got == want;
}

void collectives(parallel::ProcessGroup& pg) {
  const int rank = pg.rank(), world = pg.size();
  // 0 and 1 (fewer elements than ranks), odd, not divisible by the world size, and larger than a
  // transport piece (128 KiB / 256 KiB), so pieces and chunks split unevenly.
  const std::vector<int64_t> lengths = {0, 1, 3, 7, 1000, 100003, 300007};
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (int64_t n : lengths) {
      for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Min, RedOp::Max}) {
        Tensor t = filled(rank, n, dt);
        pg.all_reduce(t, op)->wait();
        const std::vector<double> want = answers(op, world, dt);
        for (int64_t i = 0; i < n; ++i)
          EXPECT(close_enough(element(t, i), want[i % kPeriod], dt), "all_reduce ", parallel::reduce_op_name(op), " ",
                 dt, " n=", n, " i=", i, ": got ", element(t, i), ", want ", want[i % kPeriod]);
      }
      for (int root = 0; root < world; ++root) {
        Tensor t = filled(rank, n, dt);
        pg.broadcast(t, root)->wait();
        for (int64_t i = 0; i < n; ++i)
          EXPECT(element(t, i) == value(root, i) || dt == DType::bf16, "broadcast root ", root, " n=", n, " i=", i);
        if (dt == DType::bf16)
          for (int64_t i = 0; i < n; ++i)
            EXPECT(element(t, i) == from_bf16(to_bf16(static_cast<float>(value(root, i)))), "bf16 broadcast");
      }
      std::vector<Tensor> gathered;
      for (int r = 0; r < world; ++r) gathered.push_back(filled(world + 5, n, dt));  // anything but the answer
      pg.all_gather(gathered, filled(rank, n, dt))->wait();
      for (int r = 0; r < world; ++r) {
        const Tensor want = filled(r, n, dt);
        for (int64_t i = 0; i < n; ++i)
          EXPECT(element(gathered[r], i) == element(want, i), "all_gather from rank ", r, " n=", n, " i=", i);
      }
      for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Max}) {
        // Rank r's input j is the pattern of rank r shifted by j, so each output differs.
        std::vector<Tensor> inputs;
        for (int j = 0; j < world; ++j) inputs.push_back(filled(rank, n, dt));
        Tensor out = filled(world + 5, n, dt);
        pg.reduce_scatter(out, inputs, op)->wait();
        const std::vector<double> want = answers(op, world, dt);
        for (int64_t i = 0; i < n; ++i)
          EXPECT(close_enough(element(out, i), want[i % kPeriod], dt), "reduce_scatter n=", n, " i=", i);
      }
    }
  }
  // float16 sums whose result bits, read as an integer and converted, give the bits of the first
  // operand: gloo::float16's assignment skips such a store (16 + 19440 gives 16), which the gloo
  // backend must not inherit. Rank 0 holds a, rank 1 b (both orders), the others zero.
  const float pairs[][2] = {{16, 19440}, {19440, 16}, {32, 20448}, {20448, 32}, {48, 20944}};
  Tensor h = empty({5}, DType::f16);
  for (int64_t i = 0; i < 5; ++i)
    static_cast<uint16_t*>(h.data())[i] = float_to_fp16(rank == 0 ? pairs[i][0] : rank == 1 ? pairs[i][1] : 0.0f);
  pg.all_reduce(h)->wait();
  for (int64_t i = 0; i < 5; ++i)
    EXPECT(world < 2 || element(h, i) == pairs[i][0] + pairs[i][1], "float16 sum ", pairs[i][0], " + ", pairs[i][1],
           ": got ", element(h, i));
  pg.barrier()->wait();
}

// FNV-1a over the bits of `t`, continuing from `hash`.
constexpr uint64_t kFnvBasis = 1469598103934665603ull;
uint64_t hash_bits(const Tensor& t, uint64_t hash = kFnvBasis) {
  const uint8_t* bytes = static_cast<const uint8_t*>(t.data());
  for (int64_t i = 0; i < t.numel() * t.element_size(); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

// All-reduces of small integers -- exact in any order of the sums -- for every op and dtype, on
// lengths of 0, 1, 5, fewer than the ranks and over a million (none divisible by every host's and the
// job's rank counts); checks each and prints one hash of all their bits, which must be the same on
// every rank and under either algorithm (RINGGRAD_RING_ALGORITHM).
void exact(parallel::ProcessGroup& pg) {
  const int rank = pg.rank(), world = pg.size();
  uint64_t hash = kFnvBasis;
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{world - 1}, int64_t{(1 << 20) + 3}}) {
      for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Min, RedOp::Max}) {
        Tensor t = filled(rank, n, dt);
        pg.all_reduce(t, op)->wait();
        const std::vector<double> want = answers(op, world, dt);
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i) wrong += !close_enough(element(t, i), want[i % kPeriod], dt);
        EXPECT(wrong == 0, "all_reduce ", parallel::reduce_op_name(op), " ", dt, " n=", n, ": ", wrong,
               " elements differ from the answer");
        hash = hash_bits(t, hash);
      }
    }
  }
  std::printf("exact hash %016llx\n", static_cast<unsigned long long>(hash));
}

// Prints an FNV-1a hash of the bits of a random all-reduce, for the determinism test to compare.
void determinism(parallel::ProcessGroup& pg) {
  Tensor t = randn({1 << 20}, DType::f32, /*seed=*/1000 + pg.rank());
  pg.all_reduce(t)->wait();
  std::printf("hash %016llx\n", static_cast<unsigned long long>(hash_bits(t)));
}

// --- helpers of the fault scenarios ---

std::string pid_file(int r) {
  return detail::str(std::getenv("PID_DIR") ? std::getenv("PID_DIR") : "/tmp", "/rank", r, ".pid");
}

void write_pid_file(int r) {
  const std::string path = pid_file(r);
  std::FILE* f = std::fopen((path + ".tmp").c_str(), "w");
  std::fprintf(f, "%d\n", static_cast<int>(::getpid()));
  std::fclose(f);
  std::rename((path + ".tmp").c_str(), path.c_str());
}

void kill_victim(int r) {
  std::FILE* f = std::fopen(pid_file(r).c_str(), "r");
  int pid = 0;
  if (f != nullptr && std::fscanf(f, "%d", &pid) == 1 && pid > 0) ::kill(pid, SIGKILL);
  if (f != nullptr) std::fclose(f);
}

// Rank `rank` of a job that meets the others by hand (the steps of init_process_group), so that
// something can happen between the rendezvous -- after which the others go on to set up the ring --
// and this rank's own ring setup. "intruder": rank 0 publishes its ring listener once it knows every
// rank's host (the ring's order depends on them) and the all-reduce each asks for (which must
// agree; RingOptions' default is "auto"); this rank then connects INTRUDERS (1 by default) silent
// clients to that listener, which hold their connections open and say nothing. "die_in_setup": this
// rank sleeps SLOW_MS, while the others create their channels and wait for this rank's.
std::shared_ptr<parallel::ProcessGroup> ring_by_hand(const std::string& scenario, int rank, int world, int timeout_ms,
                                                     std::thread& holder) {
  const std::string address = std::string("127.0.0.1:") + std::getenv("MASTER_PORT");
  auto store = std::make_shared<parallel::TCPStore>(parallel::TCPStoreOptions()
                                                        .host("127.0.0.1")
                                                        .port(std::atoi(std::getenv("MASTER_PORT")))
                                                        .timeout(std::chrono::milliseconds(timeout_ms))
                                                        .token(parallel::job_token()));
  parallel::rendezvous(*store, {rank, world, address, ""}, std::chrono::milliseconds(timeout_ms));
  store->set("ring/host/" + std::to_string(rank), parallel::host_identity());
  store->set("ring/algorithm/" + std::to_string(rank), "auto");
  parallel::RingOptions options;
  options.transport() = "tcp";
  if (scenario == "intruder") {
    std::string listener = store->get_string("ring/tcp/0");  // "address:port pid host"
    listener = listener.substr(0, listener.find(' '));
    const size_t colon = listener.rfind(':');
    const int count = std::getenv("INTRUDERS") ? std::atoi(std::getenv("INTRUDERS")) : 1;
    auto sockets = std::make_shared<std::vector<parallel::Socket>>();
    for (int i = 0; i < count; ++i)
      sockets->push_back(parallel::connect_to(listener.substr(0, colon), std::stoi(listener.substr(colon + 1)),
                                              parallel::deadline_in(std::chrono::seconds(10)), "intruder"));
    std::printf("rank %d: %d silent client%s connected to rank 0's ring listener at %s\n", rank, count,
                count == 1 ? "" : "s", listener.c_str());
    std::fflush(stdout);
    // INTRUDERS_AFTER: as many more keep connecting while this rank connects (a flood that goes on
    // around the real peer), until the listener is gone.
    const int after = std::getenv("INTRUDERS_AFTER") ? std::atoi(std::getenv("INTRUDERS_AFTER")) : 0;
    holder = std::thread([sockets, listener, colon, after] {
      try {
        for (int i = 0; i < after; ++i)
          sockets->push_back(parallel::connect_to(listener.substr(0, colon), std::stoi(listener.substr(colon + 1)),
                                                  parallel::deadline_in(std::chrono::milliseconds(200)), "intruder"));
      } catch (const std::exception&) {
        // the listener closed: the ring is connected
      }
      std::this_thread::sleep_for(std::chrono::seconds(30));
    });
  } else {
    // Rank 0 has created its channel once it published it; then it waits for this rank's.
    options.transport() = "shm";
    store->wait({"ring/shm/0/channel"});
    std::printf("rank %d: rank 0's channel is published\n", rank);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(std::getenv("SLOW_MS"))));
  }
  options.timeout() = options.setup_timeout() = std::chrono::milliseconds(timeout_ms);
  return std::make_shared<parallel::RingProcessGroup>(store, rank, world, options);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  const std::string transport = argc > 2 ? argv[2] : "auto";
  int rank = std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "0");  // until the group says (mpirun sets no RANK)
  const int victim = std::getenv("VICTIM") ? std::atoi(std::getenv("VICTIM")) : 1;
  const std::string backend = std::getenv("BACKEND") ? std::getenv("BACKEND") : "ring";
  const int timeout_ms = std::getenv("TIMEOUT_MS") ? std::atoi(std::getenv("TIMEOUT_MS")) : 30000;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_ms = [&start] {
    return static_cast<long long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count());
  };
  std::thread intruder;
  try {
    if (scenario == "absent" && rank == victim) {
      std::printf("rank %d: not joining\n", rank);  // a rank that was never started
      return 0;
    }

    // VICTIM_TOKEN: the victim comes with another job's token.
    if (rank == victim && std::getenv("VICTIM_TOKEN")) ::setenv("RINGGRAD_JOB_TOKEN", std::getenv("VICTIM_TOKEN"), 1);
    // VICTIM_RANK: the victim claims another rank's number.
    if (rank == victim && std::getenv("VICTIM_RANK")) ::setenv("RANK", std::getenv("VICTIM_RANK"), 1);
    // VICTIM_RUN_ID: the victim belongs to another torchrun job.
    if (rank == victim && std::getenv("VICTIM_RUN_ID"))
      ::setenv("TORCHELASTIC_RUN_ID", std::getenv("VICTIM_RUN_ID"), 1);
    // VICTIM_ALGORITHM: the victim asks for another all-reduce than the others.
    if (rank == victim && std::getenv("VICTIM_ALGORITHM"))
      ::setenv("RINGGRAD_RING_ALGORITHM", std::getenv("VICTIM_ALGORITHM"), 1);
    // HOST_IDS=a,a,b,b: rank r is on the r-th host named (RINGGRAD_HOST_ID), emulating hosts on one machine.
    if (const char* ids = std::getenv("HOST_IDS")) {
      std::string rest = std::string(ids) + ",";
      for (int r = 0; r < rank && rest.find(',') != std::string::npos; ++r) rest.erase(0, rest.find(',') + 1);
      ::setenv("RINGGRAD_HOST_ID", rest.substr(0, rest.find(',')).c_str(), 1);
    }
    auto options = parallel::InitOptions().transport(transport);
    if (std::getenv("TIMEOUT_MS")) options.timeout(std::chrono::milliseconds(timeout_ms));
    // die_in_setup: the victim is killed (SIGALRM's default action) while it waits in the ring's setup
    // for a rank that is slow to get there -- after it created its shared-memory channel.
    if (scenario == "die_in_setup" && rank == victim) ::alarm(3);
    const bool by_hand = (scenario == "intruder" && rank == victim) || (scenario == "die_in_setup" && rank != victim);
    auto pg = by_hand ? ring_by_hand(scenario, rank, std::atoi(std::getenv("WORLD_SIZE")), timeout_ms, intruder)
                      : parallel::init_process_group(backend, options);
    rank = pg->rank();
    // The ring's transport; another backend's name ("transport gloo").
    const auto ring = std::dynamic_pointer_cast<parallel::RingProcessGroup>(pg);
    std::printf("rank %d transport %s\n", rank, ring ? ring->transport_name() : pg->backend_name());
    if (ring) {  // the ranks in ring order (host by host)
      std::string order;
      for (const int r : ring->ring_order()) order += " " + std::to_string(r);
      std::printf("rank %d ring order%s\n", rank, order.c_str());
      std::printf("rank %d algorithm %s\n", rank, ring->algorithm_name());
    }
    if (scenario == "collectives") {
      collectives(*pg);
    } else if (scenario == "determinism") {
      determinism(*pg);
    } else if (scenario == "exact") {
      exact(*pg);
    } else if (scenario == "die") {
      // The victim vanishes in the middle of a stream of all-reduces, as a crashed process does.
      Tensor t = ones({1 << 18});
      for (int step = 0; step < 1000; ++step) {
        if (rank == victim && step == 5) ::kill(::getpid(), SIGKILL);
        pg->all_reduce(t, RedOp::Avg)->wait();
      }
    } else if (scenario == "stream") {
      // All-reduces until something goes wrong, for the fault tests of tests/multihost (which take a
      // link down, or a host, from outside); "streaming" once the first one went through. Two
      // minutes at most, so a fault that goes unnoticed fails the test instead of hanging it.
      Tensor t = ones({1 << 16});
      for (int step = 0; elapsed_ms() < 120000; ++step) {
        pg->all_reduce(t, RedOp::Avg)->wait();
        if (step == 0) {
          std::printf("rank %d: streaming\n", rank);
          std::fflush(stdout);
        }
      }
      std::printf("rank %d: still streaming after two minutes\n", rank);
      return 4;
    } else if (scenario == "stop") {
      // The victim is stopped (SIGSTOP, as Ctrl-Z does), not killed: its sockets and shared memory stay
      // open and it still "exists", so only deadlines can tell. It leaves its pid for the survivors,
      // who kill it once they have failed (the test itself never waits for it).
      Tensor t = ones({1 << 10});
      for (int step = 0; step < 1000; ++step) {
        if (rank == victim && step == 3) {
          write_pid_file(victim);
          ::kill(::getpid(), SIGSTOP);
        }
        try {
          pg->all_reduce(t, RedOp::Sum)->wait();
        } catch (const std::exception& e) {
          std::printf("error after %lld ms: %s\n", elapsed_ms(), e.what());
          std::fflush(stdout);
          // KEEP_VICTIM: across (emulated) hosts nobody can reach the victim; its own launcher stops it.
          if (std::getenv("KEEP_VICTIM") == nullptr) kill_victim(victim);
          return 3;
        }
      }
    } else if (scenario == "stop_both") {
      // The whole job is stopped for twice the timeout in the middle of an all-reduce, as Ctrl-Z under
      // ringrun does, then continued: the time stopped must not count against the deadline. Rank 0
      // waits in all-reduce #6 for the victim, which is late; a child of rank 0 stops both, then
      // continues rank 0 first, so rank 0 wakes in its wait with the deadline long past.
      write_pid_file(rank);
      pg->barrier()->wait();
      Tensor t = ones({1 << 12});
      for (int step = 0; step < 12; ++step) {
        if (step == 6 && rank == victim) std::this_thread::sleep_for(std::chrono::milliseconds(500));
        if (step == 6 && rank != victim) {
          std::FILE* f = std::fopen(pid_file(victim).c_str(), "r");
          int peer = 0;
          EXPECT(f != nullptr && std::fscanf(f, "%d", &peer) == 1 && peer > 0, "no pid file for rank ", victim);
          if (f != nullptr) std::fclose(f);
          const pid_t me = ::getpid();
          const timespec settle{0, 100 * 1000 * 1000};
          const timespec stopped{2 * timeout_ms / 1000, (2 * timeout_ms % 1000) * 1000 * 1000};
          if (::fork() == 0) {  // async-signal-safe calls only: the parent has threads
            ::nanosleep(&settle, nullptr);
            ::kill(me, SIGSTOP);
            ::kill(peer, SIGSTOP);
            ::nanosleep(&stopped, nullptr);
            ::kill(me, SIGCONT);
            ::nanosleep(&settle, nullptr);
            ::kill(peer, SIGCONT);
            ::_exit(0);
          }
        }
        pg->all_reduce(t, RedOp::Sum)->wait();
        EXPECT(element(t, 0) == std::pow(2.0, step + 1), "stop_both step ", step, ": got ", element(t, 0));
      }
    } else if (scenario == "intruder" || scenario == "absent" || scenario == "one") {
      Tensor t = full({1000}, 1.0);
      pg->all_reduce(t)->wait();
      EXPECT(element(t, 0) == pg->size(), "all_reduce: got ", element(t, 0));
    } else if (scenario == "wake") {
      // Rank 0 waits in each all-reduce while the victim sleeps 50 ms before joining it: over shared
      // memory rank 0 sleeps on the channel's futex by then, and the victim's data must wake it at
      // once. The victim contributes the time it joined (steady_clock is CLOCK_MONOTONIC, one clock
      // for every process of the host), so the sum tells rank 0 how long the wake-up took.
      // Meanwhile rank 0 must really sleep: its CPU time over the waits stays a small part of them.
      auto cpu_ms = [] {
        rusage usage{};
        ::getrusage(RUSAGE_SELF, &usage);
        return (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e3 +
               (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-3;
      };
      const auto now_ns = [] {
        return static_cast<double>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
                .count());
      };
      constexpr int kRounds = 7;
      std::vector<double> late_ms;
      double waited_ms = 0, spent_ms = 0;
      pg->barrier()->wait();
      for (int round = 0; round < kRounds; ++round) {
        if (rank == victim) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        Tensor t = zeros({2}, DType::f64);
        if (rank == victim) static_cast<double*>(t.data())[0] = static_cast<double*>(t.data())[1] = now_ns();
        const double start_ns = now_ns(), start_cpu = cpu_ms();
        pg->all_reduce(t)->wait();
        const double end_ns = now_ns();
        if (rank != victim) {
          late_ms.push_back((end_ns - element(t, 0)) * 1e-6);
          waited_ms += (end_ns - start_ns) * 1e-6;
          spent_ms += cpu_ms() - start_cpu;
        }
        pg->barrier()->wait();
      }
      // A large one too, with the victim late: the channel fills, so the sender sleeps for room.
      if (rank == victim) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      Tensor big = filled(rank, 3 << 20, DType::f32);
      pg->all_reduce(big)->wait();
      const std::vector<double> want = answers(RedOp::Sum, pg->size(), DType::f32);
      for (int64_t i = 0; i < big.numel(); i += 4099)
        EXPECT(element(big, i) == want[i % kPeriod], "late large all_reduce i=", i, ": got ", element(big, i));
      if (rank != victim) {
        std::string all;
        for (const double ms : late_ms) all += detail::str(" ", ms);
        std::sort(late_ms.begin(), late_ms.end());
        std::printf("rank %d: woken after (ms)%s; median %.3f; waited %.1f ms on %.1f ms of CPU\n", rank, all.c_str(),
                    late_ms[kRounds / 2], waited_ms, spent_ms);
      }
    } else if (scenario == "die_asleep") {
      // The victim dies while the others are asleep waiting for it in an all-reduce, long after they
      // went to sleep on the channel's futex (no data will come to wake them).
      Tensor t = ones({1000});
      pg->all_reduce(t)->wait();
      if (rank == victim) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ::kill(::getpid(), SIGKILL);
      }
      const auto asleep_since = std::chrono::steady_clock::now();
      try {
        pg->all_reduce(t)->wait();
      } catch (const std::exception& e) {
        const auto in_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - asleep_since);
        std::printf("failed %lld ms into the all-reduce\n", static_cast<long long>(in_ms.count()));
        throw;
      }
    } else if (scenario == "slow") {
      // A rank that arrives late, but within the timeout, is just waited for.
      if (rank == victim) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      Tensor t = full({1000}, 1.0);
      pg->all_reduce(t)->wait();
      EXPECT(element(t, 0) == pg->size(), "slow all_reduce: got ", element(t, 0));
    } else if (scenario == "mismatch") {
      Tensor t = ones({rank == victim ? 8 : 16});
      pg->all_reduce(t)->wait();
    } else {
      std::printf("unknown scenario '%s'\n", scenario.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    std::printf("error after %lld ms: %s\n", elapsed_ms(), e.what());
    std::fflush(stdout);
    if (intruder.joinable()) intruder.detach();
    return 3;
  }
  if (intruder.joinable()) intruder.detach();  // it only holds a connection rank 0 has dropped
  std::printf(g_failures ? "rank %d: %d failures\n" : "rank %d: ok\n", rank, g_failures);
  std::fflush(stdout);
  return g_failures ? 1 : 0;
}
