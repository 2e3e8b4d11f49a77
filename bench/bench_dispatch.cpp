// bench/bench_dispatch.cpp: per-op dispatch overhead and CPU GEMM throughput, next to PyTorch eager.
//
// Dispatch: ns per call of a 1-element float32 `add` without and with requires_grad (with grad the
// call records a graph that is freed when the dropped output goes), and of `linear` forward+backward
// on a 64x64 input. GEMM: GFLOP/s (2 N^3 / time) of `matmul` on contiguous square float32 matrices.
// The goal: dispatch in at most a quarter of PyTorch's time, judged against PyTorch measured in
// the same run by bench/torch_reference.py (or, without PyTorch, against 225/375 ns: a quarter of
// the 0.9/1.5 us PyTorch 1.13 measured on this kind of machine).
//
// Every measured result is checked (the last column, #wrong); any wrong result exits 1.
//
//   bench_dispatch [--quick] [--reps N] [--no-torch] [--python PATH] [--json FILE]
#include <ringgrad/ringgrad.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
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

struct Options {
  bool quick = false;
  int reps = 0;  // 0: 7, or 3 with --quick
  bool torch = true;
  std::string python = "/usr/bin/python3";
  std::string json;
};

Options parse(int argc, char** argv) {
  Options opt;
  ringgrad::cli::FlagParser flags("bench_dispatch",
                                  "Per-op dispatch overhead and CPU GEMM throughput, next to PyTorch eager.");
  flags.add_bool("--quick", &opt.quick, "fewer and shorter repetitions, no N=2048 GEMM");
  flags.add_int("--reps", &opt.reps, "timed repetitions per measurement, of which the median is reported", 1, 1000)
      .default_text("7, or 3 with --quick");
  bool no_torch = false;
  flags.add_bool("--no-torch", &no_torch, "skip the PyTorch reference");
  flags.add_string("--python", &opt.python, "interpreter for bench/torch_reference.py").metavar("PATH");
  flags.add_string("--json", &opt.json, "also write the rows as JSON").metavar("FILE");
  flags.parse(argc, argv);
  if (const std::string why = bench::unwritable_output({{"--json", opt.json}}); !why.empty())
    flags.exit_with_usage(why);
  opt.torch = !no_torch;
  return opt;
}

// Keeps a result observable so the call producing it cannot be dropped.
void keep(const rg::Tensor& t) { bench::do_not_optimize(t.impl()); }

int count_wrong(double got, double want, double tol) { return std::fabs(got - want) <= tol ? 0 : 1; }

// linear fwd+bwd against naive double loops: y = x W^T + b and, for loss = sum(y),
// dx[n][i] = sum_o W[o][i], dW[o][i] = sum_n x[n][i], db[o] = rows.
int check_linear(const rg::Tensor& x, const rg::Tensor& w, const rg::Tensor& b, const rg::Tensor& y) {
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  const auto xv = x.to_vector<float>(), wv = w.to_vector<float>(), bv = b.to_vector<float>();
  const auto yv = y.to_vector<float>();
  const auto dx = x.grad().to_vector<float>(), dw = w.grad().to_vector<float>(), db = b.grad().to_vector<float>();
  int wrong = 0;
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double ref = bv[o], mag = std::fabs(bv[o]);
      for (int64_t i = 0; i < in; ++i) {
        ref += double(xv[n * in + i]) * wv[o * in + i];
        mag += std::fabs(double(xv[n * in + i]) * wv[o * in + i]);
      }
      wrong += count_wrong(yv[n * out + o], ref, 1e-5 * mag + 1e-6);
    }
  for (int64_t i = 0; i < in; ++i) {
    double sx = 0, mx = 0, sw = 0, mw = 0;
    for (int64_t n = 0; n < rows; ++n) sx += xv[n * in + i], mx += std::fabs(xv[n * in + i]);
    for (int64_t o = 0; o < out; ++o) sw += wv[o * in + i], mw += std::fabs(wv[o * in + i]);
    for (int64_t o = 0; o < out; ++o) wrong += count_wrong(dw[o * in + i], sx, 1e-5 * mx + 1e-6);
    for (int64_t n = 0; n < rows; ++n) wrong += count_wrong(dx[n * in + i], sw, 1e-5 * mw + 1e-6);
  }
  for (int64_t o = 0; o < out; ++o) wrong += count_wrong(db[o], double(rows), 1e-6 * rows);
  return wrong;
}

// C = A B for N x N matrices against a double-precision dot product: every entry when `all`,
// otherwise `samples` random entries. The tolerance is the usual float32 bound, K u sum |a b|.
int check_gemm(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c, int64_t n,
               bool all, int samples) {
  auto wrong_at = [&](int64_t i, int64_t j) {
    double ref = 0, mag = 0;
    for (int64_t k = 0; k < n; ++k) {
      const double p = double(a[i * n + k]) * b[k * n + j];
      ref += p;
      mag += std::fabs(p);
    }
    return count_wrong(c[i * n + j], ref, 2.0 * n * 6e-8 * mag + 1e-6);
  };
  int wrong = 0;
  if (all) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) wrong += wrong_at(i, j);
  } else {
    std::mt19937_64 rng(42);
    std::uniform_int_distribution<int64_t> pick(0, n - 1);
    for (int s = 0; s < samples; ++s) wrong += wrong_at(pick(rng), pick(rng));
  }
  return wrong;
}

// PyTorch's numbers ("key value" lines), or an empty map and `why` explaining their absence.
std::map<std::string, std::string> run_torch(const Options& opt, int threads, int reps, double min_time,
                                             const std::vector<int64_t>& sizes, std::string& why) {
  std::string size_list;
  for (int64_t s : sizes) size_list += (size_list.empty() ? "" : ",") + std::to_string(s);
  return bench::run_key_value_script(opt.python, std::string(RINGGRAD_BENCH_DIR) + "/torch_reference.py",
                                     "--threads " + std::to_string(threads) + " --reps " + std::to_string(reps) +
                                         " --min-time " + std::to_string(min_time) + " --sizes " + size_list,
                                     why);
}

double number(const std::map<std::string, std::string>& kv, const std::string& key) {
  const auto it = kv.find(key);
  return it == kv.end() ? NAN : std::strtod(it->second.c_str(), nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const int reps = opt.reps ? opt.reps : (opt.quick ? 3 : 7);
  const double min_time = opt.quick ? 0.02 : 0.05;
  const std::vector<int64_t> sizes =
      opt.quick ? std::vector<int64_t>{256, 1024} : std::vector<int64_t>{256, 1024, 2048};
  // Eigen's GEMM runs on OpenMP's threads: OMP_NUM_THREADS, else one per core. PyTorch gets the same.
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const int threads = omp && std::atoi(omp) > 0 ? std::atoi(omp) : std::max(1u, std::thread::hardware_concurrency());

  try {
    // --- ringgrad: dispatch -----------------------------------------------------------------------
    const rg::Tensor a = rg::full({1}, 1.0), b = rg::full({1}, 2.0);
    int add_wrong = count_wrong(rg::add(a, b).item(), 3.0, 0.0);
    const auto add_ns = bench::time_per_call([&] { keep(rg::add(a, b)); }, reps, min_time);

    rg::Tensor ga = rg::full({1}, 1.0), gb = rg::full({1}, 2.0);
    ga.requires_grad_(true);
    gb.requires_grad_(true);
    int add_grad_wrong = 0;
    {
      const rg::Tensor c = rg::add(ga, gb);
      c.backward();
      add_grad_wrong = count_wrong(c.item(), 3.0, 0.0) + count_wrong(ga.grad().item(), 1.0, 0.0) +
                       count_wrong(gb.grad().item(), 1.0, 0.0) + (c.requires_grad() ? 0 : 1);
      ga.set_grad(rg::Tensor());
      gb.set_grad(rg::Tensor());
    }
    const auto add_grad_ns = bench::time_per_call([&] { keep(rg::add(ga, gb)); }, reps, min_time);

    rg::Tensor x = rg::randn({64, 64}, rg::DType::f32, 1), w = rg::randn({64, 64}, rg::DType::f32, 2);
    rg::Tensor bias = rg::randn({64}, rg::DType::f32, 3);
    x.requires_grad_(true);
    w.requires_grad_(true);
    bias.requires_grad_(true);
    auto linear_step = [&] {
      x.set_grad(rg::Tensor());
      w.set_grad(rg::Tensor());
      bias.set_grad(rg::Tensor());
      const rg::Tensor y = rg::linear(x, w, bias);
      rg::sum(y).backward();
      return y;
    };
    const int linear_wrong = check_linear(x, w, bias, linear_step());
    const auto linear_ns = bench::time_per_call([&] { keep(linear_step()); }, reps, min_time);

    // --- ringgrad: GEMM ---------------------------------------------------------------------------
    std::vector<double> gemm_gflops, gemm_ms;
    std::vector<int> gemm_wrong;
    for (int64_t n : sizes) {
      const rg::Tensor ma = rg::randn({n, n}, rg::DType::f32, 10 + n), mb = rg::randn({n, n}, rg::DType::f32, 20 + n);
      gemm_wrong.push_back(check_gemm(ma.to_vector<float>(), mb.to_vector<float>(),
                                      rg::matmul(ma, mb).to_vector<float>(), n, n <= 256, 4096));
      const double ns = bench::median(bench::time_per_call([&] { keep(rg::matmul(ma, mb)); }, reps, min_time));
      gemm_ms.push_back(ns * 1e-6);
      gemm_gflops.push_back(2.0 * double(n) * n * n / ns);
    }

    // --- PyTorch, after ringgrad so the two never share the cores -----------------------------------
    std::string torch_why = "skipped (--no-torch)";
    std::map<std::string, std::string> pt;
    if (opt.torch) pt = run_torch(opt, threads, reps, min_time, sizes, torch_why);

    // --- the report ---------------------------------------------------------------------------------
    const double add_med = bench::median(add_ns), add_grad_med = bench::median(add_grad_ns);
    const double linear_med = bench::median(linear_ns);
    const double pt_add = number(pt, "add_nograd_ns"), pt_add_grad = number(pt, "add_grad_ns");
    const double pt_linear = number(pt, "linear_fwd_bwd_ns");
    // Without PyTorch in this run, a quarter of the 0.9 / 1.5 us PyTorch 1.13 took on this kind of machine.
    const double target_add = pt.empty() ? 225.0 : pt_add / 4, target_add_grad = pt.empty() ? 375.0 : pt_add_grad / 4;

    bench::Table dispatch("dispatch", {{"op", "", 17, true},
                                       {"grad", "", 4, true},
                                       {"ringgrad", "ns", 9},
                                       {"pytorch", "ns", 9},
                                       {"ratio", "rg/pt", 7},
                                       {"target", "ns", 8},
                                       {"met", "", 3},
                                       {"#wrong", "", 6}});
    auto met = [](double v, double target) { return std::isnan(target) ? "-" : v <= target ? "yes" : "no"; };
    dispatch.add_row({"add 1-elem", "no", bench::fmt(add_med), bench::fmt(pt_add), bench::fmt(add_med / pt_add, 2),
                      bench::fmt(target_add), met(add_med, target_add), std::to_string(add_wrong)});
    dispatch.add_row({"add 1-elem", "yes", bench::fmt(add_grad_med), bench::fmt(pt_add_grad),
                      bench::fmt(add_grad_med / pt_add_grad, 2), bench::fmt(target_add_grad),
                      met(add_grad_med, target_add_grad), std::to_string(add_grad_wrong)});
    dispatch.add_row({"linear 64x64 f+b", "yes", bench::fmt(linear_med), bench::fmt(pt_linear),
                      bench::fmt(linear_med / pt_linear, 2), "-", "-", std::to_string(linear_wrong)});

    bench::Table gemm("gemm", {{"N", "", 6},
                               {"time", "ms", 9},
                               {"ringgrad", "GFLOP/s", 9},
                               {"pytorch", "GFLOP/s", 9},
                               {"ratio", "rg/pt", 7},
                               {"checked", "entries", 8},
                               {"#wrong", "", 6}});
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t n = sizes[i];
      const double pt_gflops = number(pt, "gemm_" + std::to_string(n) + "_gflops");
      gemm.add_row({std::to_string(n), bench::fmt(gemm_ms[i], 3), bench::fmt(gemm_gflops[i]), bench::fmt(pt_gflops),
                    bench::fmt(gemm_gflops[i] / pt_gflops, 2), std::to_string(n <= 256 ? n * n : 4096),
                    std::to_string(gemm_wrong[i])});
    }

    const std::string torch_desc =
        pt.empty() ? "pytorch=- (" + torch_why + ")"
                   : "pytorch=" + pt["torch_version"] + " eager cpu, threads=" + pt["threads"] + ", " + pt["python"];
    std::printf(
        "# ringgrad bench_dispatch  dtype=float32  threads=%d  cpu_devices=%d  reps=%d  min_loop=%gs  commit=%s%s\n",
        threads, rg::cpu_device_count(), reps, min_time, RINGGRAD_BENCH_COMMIT, opt.quick ? "  quick" : "");
    std::printf("%s\n", bench::machine_header().c_str());
    std::printf("# %s\n", torch_desc.c_str());
    std::printf("%s\n", bench::cpu_gemm_header().c_str());
    if (!pt.empty()) bench::print_peer_blas(stdout, pt);
    std::printf("# times: median over reps of the time per call in a loop of >= %g s; warm-up not timed\n", min_time);
    std::printf("#\n# dispatch: ratio = ringgrad/pytorch time, < 1 is faster than PyTorch; target = 1/4 of %s\n",
                pt.empty() ? "PyTorch 1.13's 0.9/1.5 us on this kind of machine" : "PyTorch measured in this run");
    std::printf(
        "# grad=yes: inputs require grad, each call records a graph that is freed with its dropped output;\n"
        "# linear f+b: y = linear(x, W, b) with x, W (64x64), b (64) requiring grad, sum(y).backward(),\n"
        "# grads reset to undefined each call; #wrong: results differing from a naive double computation\n#\n");
    dispatch.print(stdout);
    std::printf(
        "#\n# gemm: C = A B, square float32, contiguous; GFLOP/s = 2 N^3 / time (median);"
        " ratio = ringgrad/pytorch GFLOP/s, > 1 is faster\n"
        "# checked: entries compared with a double-precision dot product (all of them at N=256)\n#\n");
    gemm.print(stdout);

    int wrong = add_wrong + add_grad_wrong + linear_wrong;
    for (int g : gemm_wrong) wrong += g;
    if (wrong) std::printf("# WRONG RESULTS: %d (see #wrong)\n", wrong);

    if (!opt.json.empty()) {
      std::vector<std::pair<std::string, std::string>> run = {
          {"dtype", "float32"},
          {"threads", std::to_string(threads)},
          {"cpu_devices", std::to_string(rg::cpu_device_count())},
          {"reps", std::to_string(reps)},
          {"min_loop_s", bench::fmt(min_time, 3)},
          {"commit", RINGGRAD_BENCH_COMMIT},
          {"pytorch", pt.empty() ? "-" : pt["torch_version"]},
          {"pytorch_note", pt.empty() ? torch_why : bench::peer_blas_summary(pt)},
          {"ringgrad_gemm", rg::kernels::cpu_gemm_build()},
          {"add_grad_note", "output dropped each call, so its graph is freed inside the timed loop"}};
      if (!bench::write_json(opt.json, "bench_dispatch", run, {&dispatch, &gemm})) {
        std::fprintf(stderr, "bench_dispatch: cannot write %s\n", opt.json.c_str());
        return 1;
      }
    }
    return wrong ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dispatch: %s\n", e.what());
    return 1;
  }
}
