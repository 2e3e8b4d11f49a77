// bench/bench_mlp_step.cpp: time per training step of an MLP on the CPU, next to PyTorch eager.
//
// The model: nn::MLP 784-1024-1024-10 with ReLU (fused into the Linear's
// GEMM), batch 256, float32, cross-entropy (mean) and SGD with lr 0.01, momentum 0.9. One step is
//   forward   logits = model(x); loss = cross_entropy(logits, labels)
//   backward  loss.backward(); loss.item(); the graph is freed
//   optim     opt.step(); opt.zero_grad()            (gradients set to undefined, PyTorch's set_to_none)
// The same batch is used every step. For each thread count a fresh model is loaded from the same
// initial weights; `curve` + `warmup` steps run untimed, then `steps` timed ones. The table shows
// the median step time with p10/p90, the median of each phase, and ratio = ringgrad / PyTorch.
//
// PyTorch (bench/torch_mlp_step.py, torch.set_num_threads) runs after ringgrad, so the two never
// share the cores, from the very same data and initial weights, written to a temporary raw file.
// ringgrad's thread count is set with ringgrad::set_num_threads on the calling thread, which runs
// the whole step (one device, so backward runs there too); only the large GEMMs split across threads.
//
// Correctness (#wrong): every loss must be finite and the last below the first; and the first
// `curve` losses must match PyTorch's within float32 tolerance (same weights, data and rule).
// Any wrong result exits 1. The goal: ratio <= 0.90, a step in at most 90% of PyTorch's time, with
// PyTorch's GEMMs on their fastest correct OpenBLAS core (bench/torch_common.py).
//
//   bench_mlp_step [--quick] [--steps N] [--warmup N] [--threads LIST] [--seed N] [--no-torch]
//                  [--python PATH] [--json FILE]
#include <ringgrad/ringgrad.h>

#include <ringgrad/nn/optim/sgd.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tools/cli/flags.h"

#ifndef RINGGRAD_BENCH_DIR
#define RINGGRAD_BENCH_DIR "bench"
#endif
#ifndef RINGGRAD_BENCH_COMMIT
#define RINGGRAD_BENCH_COMMIT "unknown"
#endif

namespace rg = ringgrad;

namespace {

const std::vector<int64_t> kSizes = {784, 1024, 1024, 10};
constexpr int64_t kBatch = 256;
constexpr double kLr = 0.01, kMomentum = 0.9;
constexpr int kCurve = 5;              // leading steps whose losses are compared with PyTorch's
constexpr double kCurveRelTol = 1e-4;  // |rg - pt| <= tol * max(1, |pt|): float32 with different GEMMs
constexpr double kGoalRatio = 0.90;    // ringgrad's step / PyTorch's step, at the same thread count

struct Options {
  bool quick = false;
  int steps = 0;    // 0: 50, or 20 with --quick
  int warmup = -1;  // -1: 10, or 3 with --quick
  std::vector<int> threads = {1, 2};
  uint64_t seed = 0;
  bool torch = true;
  std::string python = "/usr/bin/python3";
  std::string json;
};

Options parse(int argc, char** argv) {
  Options opt;
  ringgrad::cli::FlagParser flags("bench_mlp_step",
                                  "Time per training step of an MLP on the CPU, next to PyTorch eager.");
  flags.add_bool("--quick", &opt.quick, "20 timed steps after 3 warm-up steps, instead of 50 after 10");
  flags
      .add_int("--steps", &opt.steps,
               "timed steps per thread count, of which the median is reported; at least 20 advised", 1, 1000000)
      .default_text("50, or 20 with --quick");
  flags
      .add_int("--warmup", &opt.warmup, "untimed steps after the " + std::to_string(kCurve) + " loss-curve steps", 0,
               1000000)
      .default_text("10, or 3 with --quick");
  flags.add_list("--threads", &opt.threads, "thread counts to measure, one after the other", 1, 4096);
  flags.add_int("--seed", &opt.seed, "seed of the data and the initial weights");
  bool no_torch = false;
  flags.add_bool("--no-torch", &no_torch, "skip the PyTorch reference");
  flags.add_string("--python", &opt.python, "interpreter for bench/torch_mlp_step.py").metavar("PATH");
  flags.add_string("--json", &opt.json, "also write the rows as JSON").metavar("FILE");
  flags.parse(argc, argv);
  if (const std::string why = bench::unwritable_output({{"--json", opt.json}}); !why.empty())
    flags.exit_with_usage(why);
  opt.torch = !no_torch;
  return opt;
}

// The p-quantile (0..1) with linear interpolation between order statistics (numpy's default).
double quantile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double pos = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

// One framework at one thread count: every step's loss, and the phases of the timed steps (ms).
struct Run {
  int threads = 0;
  std::vector<double> losses, step, forward, backward, optim;
};

// The batch and the initial weights, shared by both frameworks.
struct Problem {
  std::vector<float> x;
  std::vector<int64_t> labels;
  std::vector<std::vector<float>> weights, biases;  // per layer, row-major [out, in] and [out]
};

Problem make_problem(uint64_t seed) {
  Problem p;
  p.x = rg::randn({kBatch, kSizes[0]}, rg::DType::f32, seed).to_vector<float>();
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> label(0, kSizes.back() - 1);
  for (int64_t i = 0; i < kBatch; ++i) p.labels.push_back(label(rng));
  rg::manual_seed(seed);
  rg::nn::MLP init(kSizes, rg::nn::MLP::Act::Relu);  // PyTorch's default Linear init
  for (const auto& layer : init.layers) {
    p.weights.push_back(layer->weight.to_vector<float>());
    p.biases.push_back(layer->bias.to_vector<float>());
  }
  return p;
}

bool write_problem(const Problem& p, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = std::fwrite(p.x.data(), sizeof(float), p.x.size(), f) == p.x.size();
  ok = ok && std::fwrite(p.labels.data(), sizeof(int64_t), p.labels.size(), f) == p.labels.size();
  for (size_t l = 0; l < p.weights.size(); ++l) {
    ok = ok && std::fwrite(p.weights[l].data(), sizeof(float), p.weights[l].size(), f) == p.weights[l].size();
    ok = ok && std::fwrite(p.biases[l].data(), sizeof(float), p.biases[l].size(), f) == p.biases[l].size();
  }
  return std::fclose(f) == 0 && ok;
}

double ms_between(bench::Clock::time_point a, bench::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

Run run_ringgrad(const Problem& p, int threads, int warmup, int steps) {
  rg::set_num_threads(threads);  // for kernels started from this thread, which runs the whole step
  Run run;
  run.threads = threads;
  auto model = std::make_shared<rg::nn::MLP>(kSizes, rg::nn::MLP::Act::Relu);
  {
    rg::NoGradGuard no_grad;
    for (size_t l = 0; l < model->layers.size(); ++l) {
      const auto& layer = model->layers[l];
      layer->weight.copy_(rg::from_vector(p.weights[l], layer->weight.shape()));
      layer->bias.copy_(rg::from_vector(p.biases[l], layer->bias.shape()));
    }
  }
  rg::nn::optim::SGD opt(model->parameters(), rg::nn::optim::SGDOptions(kLr).momentum(kMomentum));
  const rg::Tensor x = rg::from_vector(p.x, {kBatch, kSizes[0]});
  const rg::Tensor labels = rg::from_vector(p.labels, {kBatch});

  for (int i = 0; i < kCurve + warmup + steps; ++i) {
    const auto t0 = bench::Clock::now();
    bench::Clock::time_point t1, t2;
    double loss_value;
    {
      const rg::Tensor logits = model->forward(x);
      const rg::Tensor loss = rg::cross_entropy(logits, labels);
      t1 = bench::Clock::now();
      loss.backward();
      loss_value = loss.item();
    }  // logits, loss and the rest of the graph go here
    t2 = bench::Clock::now();
    opt.step();
    opt.zero_grad();
    const auto t3 = bench::Clock::now();
    run.losses.push_back(loss_value);
    if (i >= kCurve + warmup) {
      run.step.push_back(ms_between(t0, t3));
      run.forward.push_back(ms_between(t0, t1));
      run.backward.push_back(ms_between(t1, t2));
      run.optim.push_back(ms_between(t2, t3));
    }
  }
  return run;
}

std::vector<double> numbers(const std::string& list) {
  std::vector<double> v;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) v.push_back(std::strtod(item.c_str(), nullptr));
  return v;
}

// PyTorch's runs (one per thread count, in order), or none and `why` explaining their absence.
std::vector<Run> run_torch(const Options& opt, const std::string& data, int warmup, int steps,
                           std::map<std::string, std::string>& kv, std::string& why) {
  std::string sizes, threads;
  for (int64_t s : kSizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
  for (int t : opt.threads) threads += (threads.empty() ? "" : ",") + std::to_string(t);
  const std::string script = std::string(RINGGRAD_BENCH_DIR) + "/torch_mlp_step.py";
  char lr[32], momentum[32];
  std::snprintf(lr, sizeof lr, "%.17g", kLr);
  std::snprintf(momentum, sizeof momentum, "%.17g", kMomentum);
  kv = bench::run_key_value_script(opt.python, script,
                                   "--data " + bench::shell_quote(data) + " --sizes " + sizes + " --batch " +
                                       std::to_string(kBatch) + " --threads " + threads + " --curve " +
                                       std::to_string(kCurve) + " --warmup " + std::to_string(warmup) + " --steps " +
                                       std::to_string(steps) + " --lr " + lr + " --momentum " + momentum,
                                   why);
  if (kv.empty()) return {};
  std::vector<Run> runs;
  for (int t : opt.threads) {
    const std::string key = "t" + std::to_string(t) + "_";
    Run r;
    r.threads = kv.count(key + "threads") ? std::atoi(kv[key + "threads"].c_str()) : t;
    r.losses = numbers(kv[key + "losses"]);
    r.step = numbers(kv[key + "step_ms"]);
    r.forward = numbers(kv[key + "forward_ms"]);
    r.backward = numbers(kv[key + "backward_ms"]);
    r.optim = numbers(kv[key + "optim_ms"]);
    if (r.step.size() != static_cast<size_t>(steps) ||
        r.losses.size() != static_cast<size_t>(kCurve + warmup + steps)) {
      why = script + " printed incomplete results for " + std::to_string(t) + " thread(s)";
      return {};
    }
    runs.push_back(std::move(r));
  }
  return runs;
}

// Non-finite losses, plus one if the last loss is not below the first.
int check_training(const Run& r) {
  int wrong = 0;
  for (double l : r.losses) wrong += std::isfinite(l) ? 0 : 1;
  if (r.losses.empty() || !(r.losses.back() < r.losses.front())) ++wrong;
  return wrong;
}

// Leading steps whose loss differs from PyTorch's beyond float32 tolerance; sets max_rel_diff.
int check_curve(const Run& rg_run, const Run& pt_run, double& max_rel_diff) {
  int wrong = 0;
  max_rel_diff = 0;
  for (int i = 0; i < kCurve; ++i) {
    const double a = rg_run.losses.at(i), b = pt_run.losses.at(i);
    const double rel = std::fabs(a - b) / std::max(1.0, std::fabs(b));
    max_rel_diff = std::isnan(rel) ? INFINITY : std::max(max_rel_diff, rel);
    wrong += rel <= kCurveRelTol ? 0 : 1;
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const int steps = opt.steps ? opt.steps : (opt.quick ? 20 : 50);
  const int warmup = opt.warmup >= 0 ? opt.warmup : (opt.quick ? 3 : 10);

  try {
    const Problem problem = make_problem(opt.seed);

    // --- ringgrad, one thread count after the other -----------------------------------------------
    std::vector<Run> rg_runs;
    for (int t : opt.threads) rg_runs.push_back(run_ringgrad(problem, t, warmup, steps));

    // --- PyTorch, after ringgrad so the two never share the cores -----------------------------------
    std::string torch_why = "skipped (--no-torch)";
    std::map<std::string, std::string> kv;
    std::vector<Run> pt_runs;
    if (opt.torch) {
      char path[] = "/tmp/ringgrad_mlp_step_XXXXXX";
      const int fd = mkstemp(path);
      if (fd < 0) {
        torch_why = "cannot create a temporary file for the weights";
      } else {
        close(fd);
        if (write_problem(problem, path))
          pt_runs = run_torch(opt, path, warmup, steps, kv, torch_why);
        else
          torch_why = std::string("cannot write ") + path;
        std::remove(path);
      }
    }

    // --- the report ---------------------------------------------------------------------------------
    bench::Table table("mlp_step", {{"framework", "", 9, true},
                                    {"threads", "", 7},
                                    {"step", "ms", 7},
                                    {"p10", "ms", 6},
                                    {"p90", "ms", 6},
                                    {"forward", "ms", 7},
                                    {"backward", "ms", 8},
                                    {"optim", "ms", 6},
                                    {"samples/s", "", 9},
                                    {"ratio", "rg/pt", 7},
                                    {"met", "", 3},
                                    {"loss_1", "", 7},
                                    {"loss_N", "", 7},
                                    {"curve", "rel", 7},
                                    {"#wrong", "", 6}});
    int wrong = 0;
    for (size_t i = 0; i < rg_runs.size(); ++i) {
      for (int side = 0; side < 2; ++side) {
        if (side == 1 && pt_runs.empty()) continue;
        const Run& r = side == 0 ? rg_runs[i] : pt_runs[i];
        const double step = bench::median(r.step);
        int row_wrong = check_training(r);
        std::string ratio = "-", met = "-", curve = "-";
        if (side == 0 && !pt_runs.empty()) {
          const double pt_step = bench::median(pt_runs[i].step);
          ratio = bench::fmt(step / pt_step, 2);
          met = step <= kGoalRatio * pt_step ? "yes" : "no";
          double rel = 0;
          row_wrong += check_curve(r, pt_runs[i], rel);
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.1e", rel);
          curve = buf;
        }
        wrong += row_wrong;
        table.add_row({side == 0 ? "ringgrad" : "pytorch", std::to_string(r.threads), bench::fmt(step, 2),
                       bench::fmt(quantile(r.step, 0.1), 2), bench::fmt(quantile(r.step, 0.9), 2),
                       bench::fmt(bench::median(r.forward), 2), bench::fmt(bench::median(r.backward), 2),
                       bench::fmt(bench::median(r.optim), 2), bench::fmt(kBatch * 1e3 / step, 0), ratio, met,
                       bench::fmt(r.losses.front(), 4), bench::fmt(r.losses.back(), 4), curve,
                       std::to_string(row_wrong)});
      }
    }

    std::string threads_list;
    for (int t : opt.threads) threads_list += (threads_list.empty() ? "" : ",") + std::to_string(t);
    const char* threading = "ringgrad::set_num_threads, torch.set_num_threads";
    const std::string torch_desc = pt_runs.empty() ? "pytorch=- (" + torch_why + ")"
                                                   : "pytorch=" + kv["torch_version"] + " eager cpu, " + kv["python"];
    std::printf(
        "# ringgrad bench_mlp_step  model=784-1024-1024-10 relu  batch=%lld  dtype=float32  "
        "loss=cross_entropy(mean)  optim=SGD(lr=%g, momentum=%g)\n",
        static_cast<long long>(kBatch), kLr, kMomentum);
    std::printf("%s\n", bench::machine_header().c_str());
    std::printf("#   threads=%s  cpu_devices=%d  curve=%d  warmup=%d  steps=%d  seed=%llu  commit=%s%s\n",
                threads_list.c_str(), rg::cpu_device_count(), kCurve, warmup, steps,
                static_cast<unsigned long long>(opt.seed), RINGGRAD_BENCH_COMMIT, opt.quick ? "  quick" : "");
    std::printf("# %s\n", torch_desc.c_str());
    std::printf("%s\n", bench::cpu_gemm_header().c_str());
    if (!pt_runs.empty()) bench::print_peer_blas(stdout, kv);
    std::printf(
        "# step = forward + backward + optim, median over the timed steps, p10/p90 beside it; the other\n"
        "# times are each phase's own median. forward: model(x), cross_entropy; backward: loss.backward(),\n"
        "# loss.item(), freeing the graph; optim: SGD step, zero_grad (grads to none). Same batch every step,\n"
        "# %d + %d untimed steps first. ratio = ringgrad/pytorch step time at the same thread count; target <= %.2f\n"
        "# #wrong: non-finite losses, + 1 if loss_N (last step) is not below loss_1, + (ringgrad rows) steps of the\n"
        "# first %d whose loss differs from PyTorch's (same data and initial weights) by more than %g relative\n#\n",
        kCurve, warmup, kGoalRatio, kCurve, kCurveRelTol);
    table.print(stdout);
    if (wrong) std::printf("# WRONG RESULTS: %d (see #wrong)\n", wrong);

    if (!opt.json.empty()) {
      std::vector<std::pair<std::string, std::string>> run = {
          {"model", "784-1024-1024-10 relu"},
          {"batch", std::to_string(kBatch)},
          {"dtype", "float32"},
          {"optim", "SGD lr=0.01 momentum=0.9"},
          {"threads", threads_list},
          {"threading", threading},
          {"cpu_devices", std::to_string(rg::cpu_device_count())},
          {"curve", std::to_string(kCurve)},
          {"warmup", std::to_string(warmup)},
          {"steps", std::to_string(steps)},
          {"seed", std::to_string(opt.seed)},
          {"commit", RINGGRAD_BENCH_COMMIT},
          {"pytorch", pt_runs.empty() ? "-" : kv["torch_version"]},
          {"pytorch_note", pt_runs.empty() ? torch_why : bench::peer_blas_summary(kv)},
          {"ringgrad_gemm", rg::kernels::cpu_gemm_build()}};
      if (!bench::write_json(opt.json, "bench_mlp_step", run, {&table})) {
        std::fprintf(stderr, "bench_mlp_step: cannot write %s\n", opt.json.c_str());
        return 1;
      }
    }
    return wrong ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_mlp_step: %s\n", e.what());
    return 1;
  }
}
