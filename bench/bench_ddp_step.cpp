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
//   ddp          the real thing: 25 MB buckets (first 1 MB), all-reduce overlapped with backward
//   ddp-bucket_view  the same with gradient_as_bucket_view: .grad is a view of its bucket, no copy back
//   ddp-no_sync  the same steps inside no_sync(): no communication -- the floor DDP is judged by
//   torch-ddp    torch.nn.parallel.DistributedDataParallel over gloo (bench/torch_ddp_step.py)
//   torch-no_sync  PyTorch's step inside its no_sync()
// Step time is the median over steps of the slowest rank; p10 and p90 alongside. ratio columns:
// ddp / ddp-no_sync (goal: <= 1.15, communication hidden behind backward) and ddp / torch-ddp
// (goal: <= 0.65).
// #wrong: after the timed steps both ranks must hold bitwise identical parameters.
#include <ringgrad/ringgrad.h>

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
  o.torch = !no_torch;
  return o;
}

// Step times (ms) of one mode on this rank.
std::vector<double> run_mode(parallel::DistributedDataParallel<nn::MLP>& ddp, nn::optim::SGD& opt, const Tensor& x,
                             const Tensor& y, const Options& o, bool sync) {
  std::vector<double> ms;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    const auto start = bench::Clock::now();
    opt.zero_grad();
    if (sync) {
      const Tensor loss = cross_entropy(ddp(x), y);
      loss.backward();
      opt.step();
      loss.item();
    } else {
      auto guard = ddp.no_sync();
      const Tensor loss = cross_entropy(ddp(x), y);
      loss.backward();
      opt.step();
      loss.item();
    }
    if (s >= o.warmup) ms.push_back(bench::seconds_since(start) * 1e3);
  }
  return ms;
}

// Runs this rank's part; rank 0's rows ("mode value...") go to `out`. Returns whether this is rank 0.
bool run_rank(const Options& o, std::ostringstream& out) {
  set_num_threads(1);
  auto pg = parallel::init_process_group("ring");
  manual_seed(0);
  auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{784, 1024, 1024, 10});
  parallel::DistributedDataParallel<nn::MLP> ddp(model, pg);
  nn::optim::SGD opt(ddp.parameters(), nn::optim::SGDOptions(0.01).momentum(0.9));
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
  // The same model under a second wrapper whose .grad are views of the buckets (no copy back). Its
  // hooks and the first wrapper's coexist: a reducer acts only after its own wrapper's forward.
  parallel::DistributedDataParallel<nn::MLP> ddp_view(model, pg, parallel::DDPOptions().gradient_as_bucket_view(true));
  nn::optim::SGD opt_view(ddp_view.parameters(), nn::optim::SGDOptions(0.01).momentum(0.9));
  pg->barrier()->wait();
  write_slowest("ddp-bucket_view", run_mode(ddp_view, opt_view, x, y, o, true));
  for (const std::string mode : {"ddp", "ddp-no_sync"}) {
    pg->barrier()->wait();
    write_slowest(mode, run_mode(ddp, opt, x, y, o, mode == "ddp"));
    if (mode != "ddp") continue;
    // Where a synchronised step's time goes (the last one's), and whether the replicas are still
    // identical: synchronised steps from identical weights keep every parameter equal, bit for bit.
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
    int64_t wrong = 0;
    for (const Tensor& p : ddp.parameters()) {
      Tensor theirs = p.detach().clone();
      pg->broadcast(theirs, 0)->wait();
      const auto a = p.to_vector<float>(), b = theirs.to_vector<float>();
      for (size_t i = 0; i < a.size(); ++i) wrong += a[i] != b[i];
    }
    Tensor w = full({1}, static_cast<double>(wrong), DType::f64);
    pg->all_reduce(w)->wait();
    if (pg->rank() == 0) out << "wrong " << w.item() << '\n';
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
  std::map<std::string, Stats> modes;
  std::vector<double> breakdown;  // forward, backward, exposed comm, copy back (ms), buckets
  int64_t wrong = -1;
  {
    std::istringstream in(results);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string name;
      f >> name;
      std::vector<double> v;
      for (double d; f >> d;) v.push_back(d);
      if (name == "wrong")
        wrong = v.empty() ? -1 : static_cast<int64_t>(v[0]);
      else if (name == "ddp-breakdown")
        breakdown = v;
      else
        modes[name] = stats_of(v);
    }
  }
  if (o.torch) {
    std::string text;
    const std::string cmd = "timeout 600 /usr/bin/python3 " +
                            bench::shell_quote(std::string(RINGGRAD_BENCH_DIR) + "/torch_ddp_step.py") + " --world " +
                            std::to_string(o.nproc) + " --batch " + std::to_string(o.batch) + " --steps " +
                            std::to_string(o.steps) + " --warmup " + std::to_string(o.warmup) + " 2>&1";
    if (bench::run_command(cmd, text) == 0) {
      std::istringstream lines(text);
      std::string line;
      while (std::getline(lines, line)) {
        std::istringstream f(line);
        std::string tag, name;
        f >> tag >> name;
        std::vector<double> v;
        for (double d; f >> d;) v.push_back(d);
        if (tag == "row") modes[name] = stats_of(v);
      }
    } else {
      std::printf("# torch DDP: not measured (needs /usr/bin/python3 with Debian's python3-torch)\n");
    }
  }
  bench::Table table("ddp_step", {{"mode", "", 16, true},
                                  {"ranks", "", 5},
                                  {"batch", "per rank", 9},
                                  {"step", "ms", 8},
                                  {"p10", "ms", 8},
                                  {"p90", "ms", 8},
                                  {"samples/s", "", 10},
                                  {"#wrong", "", 6}});
  for (const std::string name : {"ddp", "ddp-bucket_view", "ddp-no_sync", "torch-ddp", "torch-no_sync"}) {
    if (!modes.count(name)) continue;
    const Stats s = modes[name];
    table.add_row({name, std::to_string(o.nproc), std::to_string(o.batch), bench::fmt(s.median, 2),
                   bench::fmt(s.p10, 2), bench::fmt(s.p90, 2), bench::fmt(o.nproc * o.batch / s.median * 1e3, 0),
                   name == "ddp" ? std::to_string(wrong) : "-"});
  }
  std::printf(
      "# ringgrad bench_ddp_step  model=MLP 784-1024-1024-10  ranks=%d  threads/rank=1  backend=ring  "
      "warmup=%d  steps=%d  commit=%s\n#\n",
      o.nproc, o.warmup, o.steps, RINGGRAD_BENCH_COMMIT);
  table.print(stdout);
  const double ddp = modes["ddp"].median, floor = modes["ddp-no_sync"].median;
  if (breakdown.size() == 5)
    std::printf(
        "# ddp step breakdown (last step, slowest rank): forward %.2f ms, backward %.2f ms, exposed "
        "communication %.2f ms, copy back %.2f ms, %d buckets\n",
        breakdown[0], breakdown[1], breakdown[2], breakdown[3], static_cast<int>(breakdown[4]));
  std::printf(
      "# ddp / ddp-no_sync = %.3f (goal <= 1.15: communication adds at most 15%% to a step); "
      "ddp-bucket_view / ddp-no_sync = %.3f\n",
      ddp / floor, modes["ddp-bucket_view"].median / floor);
  if (modes.count("torch-ddp"))
    std::printf("# ddp / torch-ddp   = %.3f (goal <= 0.65: a step in at most 65%% of PyTorch DDP's time)\n",
                ddp / modes["torch-ddp"].median);
  if (!o.json.empty())
    bench::write_json(o.json, "bench_ddp_step", {{"ranks", std::to_string(o.nproc)}, {"commit", RINGGRAD_BENCH_COMMIT}},
                      {&table});
  return wrong == 0 ? 0 : 1;
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
