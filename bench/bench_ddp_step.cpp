// bench/bench_ddp_step.cpp: one training step under DistributedDataParallel, against its own step
// without communication and against PyTorch's DDP (gloo) on the same model, in the same run.
//
//   ./build/bench/bench_ddp_step                 # 2 processes, 1 thread each, MLP 784-1024-1024-10
//   ./build/bench/bench_ddp_step --steps 100 --json ddp_step.json
//
// Model and step as bench_mlp_step, with batch 128 per rank: forward, cross-entropy, backward,
// SGD (lr 0.01, momentum 0.9), loss.item(). Each rank is limited to one thread
// (set_num_threads(1); torch.set_num_threads(1)), so two ranks use the machine's two cores.
// Modes, each timed for `steps` steps after `warmup` untimed ones:
//   ddp          the real thing, DDP's defaults: 25 MB buckets (first 1 MB), all-reduce overlapped
//                with backward, gradient_as_bucket_view (.grad is a view of its bucket, which
//                backward writes into: no copy in or back)
//   ddp-copy     the same with gradient_as_bucket_view(false): .grad is backward's own tensor,
//                copied into its bucket and the average copied back (PyTorch's default)
//   ddp-no_sync  ddp's steps inside no_sync(): no communication -- the floor DDP is judged by
//   torch-ddp    torch.nn.parallel.DistributedDataParallel over gloo (bench/torch_ddp_step.py)
//   torch-no_sync  PyTorch's step inside its no_sync()
// Step time is the median over steps of the slowest rank; p10 and p90 alongside; cpu: the median
// CPU time of a rank's process per step (all its threads), of the rank that used most; faults: its
// page faults per step (each a page of fresh memory from the kernel, zeroed). ratio columns:
// ddp / ddp-no_sync (goal: <= 1.10, communication hidden behind backward) and ddp / torch-ddp
// (goal: <= 0.5).
// The modes take turns, 5 steps each, so that the machine's load changes fall on all of them alike.
// #wrong: after the timed steps both ranks must hold bitwise identical parameters (each
// synchronised mode trains its own copy of the model; ddp-no_sync a third one).
#include <ringgrad/ringgrad.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_launch.h"
#include "bench_util.h"
#include "tools/cli/flags.h"

using namespace ringgrad;

namespace {

struct Options {
  int nproc = 2;
  int warmup = 10, steps = 50;
  int64_t batch = 128;
  std::string json;
  bool torch = true;
};

Options parse(int argc, char** argv) {
  Options o;
  ringgrad::cli::FlagParser flags(
      "bench_ddp_step", "One DDP training step against its own step without communication and PyTorch's DDP.");
  flags.add_int("--nproc", &o.nproc, "ranks of the job, started on this machine", 1, 1024);
  flags.add_int("--steps", &o.steps, "timed steps per mode", 1, 1000000);
  flags.add_int("--warmup", &o.warmup, "untimed steps before them", 0, 1000000);
  flags.add_int("--batch", &o.batch, "samples per rank and step", 1, 1 << 20);
  flags.add_string("--json", &o.json, "also write the rows to this file").metavar("FILE");
  bool no_torch = false;
  flags.add_bool("--no-torch", &no_torch, "skip PyTorch's rows");
  flags.parse(argc, argv);
  if (const std::string why = bench::unwritable_output({{"--json", o.json}}); !why.empty()) flags.exit_with_usage(why);
  o.torch = !no_torch;
  return o;
}

// One mode: a wrapper, its optimizer, and whether its steps synchronise.
struct Mode {
  std::string name;
  parallel::DistributedDataParallel<nn::MLP>* ddp;
  nn::optim::SGD* opt;
  bool sync;
  std::vector<double> ms;      // this rank's timed steps
  std::vector<double> cpu_ms;  // the CPU time this rank's process used in each (all its threads)
  std::vector<double> faults;  // page faults in each: fresh memory the allocator had to get from the kernel
};

double page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_minflt + usage.ru_majflt);
}

// The CPU time of this whole process (compute and communication threads), in ms. Unlike the step
// time it barely changes with the machine's load: it is the work a step costs.
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

// Runs `steps` steps of one mode; appends their times (ms) when `timed`.
void run_steps(Mode& m, const Tensor& x, const Tensor& y, int steps, bool timed) {
  for (int s = 0; s < steps; ++s) {
    const auto start = bench::Clock::now();
    const double cpu_start = process_cpu_ms(), faults_start = page_faults();
    m.opt->zero_grad();
    if (m.sync) {
      const Tensor loss = cross_entropy((*m.ddp)(x), y);
      loss.backward();
      m.opt->step();
      loss.item();
    } else {
      auto guard = m.ddp->no_sync();
      const Tensor loss = cross_entropy((*m.ddp)(x), y);
      loss.backward();
      m.opt->step();
      loss.item();
    }
    if (!timed) continue;
    m.ms.push_back(bench::seconds_since(start) * 1e3);
    m.cpu_ms.push_back(process_cpu_ms() - cpu_start);
    m.faults.push_back(page_faults() - faults_start);
  }
}

// The modes take turns, kBlockSteps steps each, so that a change in the machine's load (other
// jobs, the clock) falls on all of them alike and their ratios compare like with like.
constexpr int kBlockSteps = 5;

void run_interleaved(std::vector<Mode>& modes, parallel::ProcessGroup& pg, const Tensor& x, const Tensor& y,
                     const Options& o) {
  for (Mode& m : modes) {
    pg.barrier()->wait();
    run_steps(m, x, y, o.warmup, /*timed=*/false);
  }
  for (int done = 0; done < o.steps; done += kBlockSteps) {
    for (Mode& m : modes) {
      pg.barrier()->wait();  // no_sync steps do not keep the ranks together; each block starts in step
      run_steps(m, x, y, std::min(kBlockSteps, o.steps - done), /*timed=*/true);
    }
  }
}

// Runs this rank's part; rank 0's rows ("mode value...") go to `out`. Returns whether this is rank 0.
bool run_rank(const Options& o, std::ostringstream& out) {
  set_num_threads(1);
  auto pg = parallel::init_process_group("ring");
  manual_seed(0);
  auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{784, 1024, 1024, 10});
  parallel::DistributedDataParallel<nn::MLP> ddp(model, pg);
  nn::optim::SGD opt(ddp.parameters(), nn::optim::SGDOptions(0.01).momentum(0.9));
  // A second, identical model without gradient_as_bucket_view: its .grad are tensors of their own,
  // copied into the buckets by the hooks and the averages copied back.
  manual_seed(0);
  auto model_copy = std::make_shared<nn::MLP>(std::vector<int64_t>{784, 1024, 1024, 10});
  parallel::DistributedDataParallel<nn::MLP> ddp_copy(model_copy, pg,
                                                      parallel::DDPOptions().gradient_as_bucket_view(false));
  nn::optim::SGD opt_copy(ddp_copy.parameters(), nn::optim::SGDOptions(0.01).momentum(0.9));
  // And a third for the no_sync steps, whose local updates would make the others' replicas differ.
  manual_seed(0);
  auto model_local = std::make_shared<nn::MLP>(std::vector<int64_t>{784, 1024, 1024, 10});
  parallel::DistributedDataParallel<nn::MLP> ddp_local(model_local, pg);
  nn::optim::SGD opt_local(ddp_local.parameters(), nn::optim::SGDOptions(0.01).momentum(0.9));
  const Tensor x = randn({o.batch, 784}, DType::f32, 100 + pg->rank());
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < o.batch; ++i) labels.push_back((i * 7 + pg->rank()) % 10);
  const Tensor y = from_vector(labels, {o.batch});

  auto write_slowest = [&](const std::string& name, const std::vector<double>& values) {
    // The slowest rank sets each step's pace.
    Tensor t = from_vector(values, {static_cast<int64_t>(values.size())});
    pg->all_reduce(t, parallel::ReduceOp::Max)->wait();
    if (pg->rank() == 0) {
      out << name;
      for (double v : t.to_vector<double>()) out << ' ' << v;
      out << '\n';
    }
  };
  // ddp last: its timings() below are of its own last step.
  std::vector<Mode> modes = {{"ddp-no_sync", &ddp_local, &opt_local, false, {}, {}, {}},
                             {"ddp-copy", &ddp_copy, &opt_copy, true, {}, {}, {}},
                             {"ddp", &ddp, &opt, true, {}, {}, {}}};
  run_interleaved(modes, *pg, x, y, o);
  for (const Mode& m : modes) {
    write_slowest(m.name, m.ms);
    write_slowest("cpu " + m.name, m.cpu_ms);
    write_slowest("faults " + m.name, m.faults);
  }
  {
    const parallel::DDPTimings t = ddp.timings();
    if (std::getenv("BENCH_DEBUG"))
      for (const auto& b : t.buckets)
        std::fprintf(stderr, "rank %d bucket %d: %lld B ready %+.2f ms, comm %+.2f .. %+.2f ms (backward %.2f ms)\n",
                     pg->rank(), b.index, static_cast<long long>(b.bytes),
                     std::chrono::duration<double, std::milli>(b.ready - t.backward_start).count(),
                     std::chrono::duration<double, std::milli>(b.comm_start - t.backward_start).count(),
                     std::chrono::duration<double, std::milli>(b.comm_end - t.backward_start).count(),
                     t.backward_us / 1e3);
    write_slowest("ddp-breakdown", {t.forward_us / 1e3, t.backward_us / 1e3, t.exposed_comm_us / 1e3,
                                    t.copy_back_us / 1e3, static_cast<double>(t.buckets.size())});
    for (const Mode& m : modes) {
      if (!m.sync) continue;
      int64_t wrong = 0;
      for (const Tensor& p : m.ddp->parameters()) {
        Tensor theirs = p.detach().clone();
        pg->broadcast(theirs, 0)->wait();
        const auto a = p.to_vector<float>(), b = theirs.to_vector<float>();
        for (size_t i = 0; i < a.size(); ++i) wrong += a[i] != b[i];
      }
      Tensor w = full({1}, static_cast<double>(wrong), DType::f64);
      pg->all_reduce(w)->wait();
      if (pg->rank() == 0) out << "wrong " << m.name << ' ' << w.item() << '\n';
    }
  }
  const bool lead = pg->rank() == 0;
  pg->barrier()->wait();
  parallel::destroy_process_group();  // rank 0 reports alone: the others may be gone already
  return lead;
}

struct Stats {
  double median = NAN, p10 = NAN, p90 = NAN;
};

Stats stats_of(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)]; };
  return {bench::median(v), at(0.1), at(0.9)};
}

int report(const Options& o, const std::string& results) {
  // Step time; process CPU time and page faults per step (ringgrad's modes).
  std::map<std::string, Stats> modes, cpu, faults;
  std::vector<double> breakdown;         // forward, backward, exposed comm, copy back (ms), buckets
  std::map<std::string, int64_t> wrong;  // by synchronised mode
  {
    std::istringstream in(results);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string name;
      f >> name;
      if (name == "wrong") {  // "wrong <mode> <count>"
        std::string mode;
        double count = -1;
        f >> mode >> count;
        wrong[mode] = static_cast<int64_t>(count);
        continue;
      }
      if (name == "cpu" || name == "faults") {  // "cpu <mode> <ms>...", "faults <mode> <count>..."
        std::string mode;
        f >> mode;
        std::vector<double> v;
        for (double d; f >> d;) v.push_back(d);
        (name == "cpu" ? cpu : faults)[mode] = stats_of(v);
        continue;
      }
      std::vector<double> v;
      for (double d; f >> d;) v.push_back(d);
      if (name == "ddp-breakdown")
        breakdown = v;
      else
        modes[name] = stats_of(v);
    }
  }
  std::map<std::string, std::string> peer_blas;  // torch_ddp_step.py's BLAS report (torch_common.py)
  if (o.torch) {
    std::string text;
    const std::string cmd = "timeout 600 /usr/bin/python3 " +
                            bench::shell_quote(std::string(RINGGRAD_BENCH_DIR) + "/torch_ddp_step.py") + " --world " +
                            std::to_string(o.nproc) + " --batch " + std::to_string(o.batch) + " --steps " +
                            std::to_string(o.steps) + " --warmup " + std::to_string(o.warmup) + " 2>&1";
    const int status = bench::run_command(cmd, text);
    if (status == 0) {
      std::istringstream lines(text);
      std::string line;
      while (std::getline(lines, line)) {
        std::istringstream f(line);
        std::string tag, name;
        f >> tag >> name;
        std::vector<double> v;
        for (double d; f >> d;) v.push_back(d);
        if (tag == "row") modes[name] = stats_of(v);
        if (tag.rfind("blas", 0) == 0) peer_blas[tag] = line.size() > tag.size() ? line.substr(tag.size() + 1) : "";
      }
    } else {
      std::istringstream lines(text);
      std::string last;
      for (std::string line; std::getline(lines, line);)
        if (!line.empty()) last = line;
      std::printf(
          "# torch DDP: not measured (/usr/bin/python3 bench/torch_ddp_step.py exited with status %d%s%s; "
          "it needs Debian's python3-torch)\n",
          status, status == 124 ? ", timed out after 600 s" : "", last.empty() ? "" : (": " + last).c_str());
    }
  }
  bench::Table table("ddp_step", {{"mode", "", 16, true},
                                  {"ranks", "", 5},
                                  {"batch", "per rank", 9},
                                  {"step", "ms", 8},
                                  {"p10", "ms", 8},
                                  {"p90", "ms", 8},
                                  {"samples/s", "", 10},
                                  {"cpu", "ms", 7},
                                  {"faults", "", 7},
                                  {"#wrong", "", 6}});
  for (const std::string name : {"ddp", "ddp-copy", "ddp-no_sync", "torch-ddp", "torch-no_sync"}) {
    if (!modes.count(name)) continue;
    const Stats s = modes[name];
    table.add_row({name, std::to_string(o.nproc), std::to_string(o.batch), bench::fmt(s.median, 2),
                   bench::fmt(s.p10, 2), bench::fmt(s.p90, 2), bench::fmt(o.nproc * o.batch / s.median * 1e3, 0),
                   cpu.count(name) ? bench::fmt(cpu[name].median, 2) : "-",
                   faults.count(name) ? bench::fmt(faults[name].median, 0) : "-",
                   wrong.count(name) ? std::to_string(wrong[name]) : "-"});
  }
  std::printf(
      "# ringgrad bench_ddp_step  model=MLP 784-1024-1024-10  ranks=%d  threads/rank=1  backend=ring  "
      "warmup=%d  steps=%d  commit=%s\n",
      o.nproc, o.warmup, o.steps, RINGGRAD_BENCH_COMMIT);
  std::printf("%s\n", bench::machine_header().c_str());
  std::printf("%s\n", bench::cpu_gemm_header().c_str());
  bench::print_peer_blas(stdout, peer_blas);
  std::printf("#\n");
  table.print(stdout);
  const double ddp = modes["ddp"].median, floor = modes["ddp-no_sync"].median;
  if (breakdown.size() == 5)
    std::printf(
        "# ddp step breakdown (last step, slowest rank): forward %.2f ms, backward %.2f ms, exposed "
        "communication %.2f ms, copy back %.2f ms, %d buckets\n",
        breakdown[0], breakdown[1], breakdown[2], breakdown[3], static_cast<int>(breakdown[4]));
  std::printf(
      "# ddp / ddp-no_sync = %.3f (goal <= 1.10: communication adds at most 10%% to a step); "
      "ddp-copy / ddp-no_sync = %.3f\n",
      ddp / floor, modes["ddp-copy"].median / floor);
  if (cpu.count("ddp") && cpu.count("ddp-no_sync"))
    std::printf(
        "# CPU per step beyond ddp-no_sync's (the work communication costs, hardly affected by the machine's "
        "load): ddp %.2f ms, ddp-copy %.2f ms\n",
        cpu["ddp"].median - cpu["ddp-no_sync"].median, cpu["ddp-copy"].median - cpu["ddp-no_sync"].median);
  if (modes.count("torch-ddp"))
    std::printf("# ddp / torch-ddp   = %.3f (goal <= 0.5: a step in at most half of PyTorch DDP's time)\n",
                ddp / modes["torch-ddp"].median);
  if (!o.json.empty())
    bench::write_json(o.json, "bench_ddp_step",
                      {{"ranks", std::to_string(o.nproc)},
                       {"commit", RINGGRAD_BENCH_COMMIT},
                       {"pytorch_note", peer_blas.empty() ? "-" : bench::peer_blas_summary(peer_blas)}},
                      {&table});
  bool all_right = !wrong.empty();
  for (const auto& [mode, count] : wrong) all_right = all_right && count == 0;
  return all_right ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    if (const std::optional<int> status = bench::start_ranks_unless_in_job("bench_ddp_step", o.nproc, argc, argv))
      return *status;
    std::ostringstream results;
    return run_rank(o, results) ? report(o, results.str()) : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp_step: %s\n", e.what());
    return 2;
  }
}
