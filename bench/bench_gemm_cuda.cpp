// bench/bench_gemm_cuda.cpp: float32 GEMM throughput -- ringgrad's CUDA kernel (kernels/cuda/gemm.cu)
// against cuBLAS SGEMM (TF32 off: CUBLAS_DEFAULT_MATH) and the CPU backend's Eigen GEMM.
//
// GFLOP/s = 2*M*N*K / time. GPU times come from cudaEvents around `iters` back-to-back launches on
// one stream, after `warmup` untimed launches; the median of `reps` such loops is reported. The CPU
// is timed with bench::time_per_call, only for products of at most --cpu-max-gflop GFLOP (the 4096^3
// ones take seconds each on the CPU). The goal: native >= 80% of cuBLAS at 4096^3; the H200's
// float32 (non-tensor) peak is ~67 TFLOP/s.
//
// Every result is checked: native against cuBLAS, and cuBLAS against the CPU where the CPU ran, with
// a tolerance growing with k; the last column counts wrong elements, and any wrong result exits 1.
//
//   bench_gemm_cuda [--quick] [--reps N] [--iters N] [--cpu-max-gflop X] [--json FILE]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <ringgrad/ringgrad.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "tools/cli/flags.h"
#include <ringgrad/kernels/backend.h>
#include "core/base/cuda_check.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/probe.h"

#ifndef RINGGRAD_BENCH_COMMIT
#define RINGGRAD_BENCH_COMMIT "unknown"
#endif

namespace rg = ringgrad;

namespace {

struct Options {
  bool quick = false;
  int reps = 5;
  int iters = 10;
  int warmup = 3;
  double cpu_max_gflop = 2.5;
  std::string json;
  int64_t shape[3] = {0, 0, 0};  // --shape: one NN product instead of the list
  std::string impl = "both";     // --impl: native, cublas or both (one alone: for a profiler)
};

Options parse(int argc, char** argv) {
  Options opt;
  ringgrad::cli::FlagParser flags(
      "bench_gemm_cuda", "float32 GEMM throughput: ringgrad's CUDA kernel against cuBLAS and the CPU backend.");
  flags.add_bool("--quick", &opt.quick, "square shapes up to 2048 only, fewer repetitions");
  flags.add_custom(
      "--shape", "M,N,K", "one NN product of that shape instead of the list", "three positive integers M,N,K",
      [&opt](const std::string& text) {
        int64_t mnk[3];
        size_t begin = 0;
        for (int i = 0; i < 3; ++i) {
          const size_t comma = i < 2 ? text.find(',', begin) : text.size();
          if (comma == std::string::npos) return false;
          const std::optional<int64_t> v = ringgrad::cli::parse_integer<int64_t>(text.substr(begin, comma - begin));
          if (!v || *v < 1 || *v > (int64_t{1} << 20)) return false;
          mnk[i] = *v;
          begin = comma + 1;
        }
        for (int i = 0; i < 3; ++i) opt.shape[i] = mnk[i];
        return true;
      },
      [&opt] {
        return opt.shape[0] == 0 ? std::string()
                                 : std::to_string(opt.shape[0]) + "," + std::to_string(opt.shape[1]) + "," +
                                       std::to_string(opt.shape[2]);
      });
  flags.add_choice("--impl", &opt.impl, {"native", "cublas", "both"},
                   "time ringgrad's kernel (native), cuBLAS's, or both; one alone launches nothing else, for ncu "
                   "--launch-count 1");
  flags.add_int("--reps", &opt.reps, "timed loops per measurement, of which the median is reported", 1, 100000)
      .default_text("5, or 3 with --quick");
  flags.add_int("--iters", &opt.iters, "launches per timed loop", 1, 1000000).default_text("10, or 5 with --quick");
  flags.add_double("--cpu-max-gflop", &opt.cpu_max_gflop, "time the CPU only for products of at most X GFLOP", 0.0,
                   1e6);
  flags.add_string("--json", &opt.json, "also write the rows as JSON").metavar("FILE");
  flags.parse(argc, argv);
  if (const std::string why = bench::unwritable_output({{"--json", opt.json}}); !why.empty())
    flags.exit_with_usage(why);
  if (opt.quick && !flags.was_set("--reps")) opt.reps = 3;
  if (opt.quick && !flags.was_set("--iters")) opt.iters = 5;
  return opt;
}

struct Shape {
  const char* name;
  int64_t m, n, k;
  bool trans_a, trans_b;
};

struct Device {
  float* p = nullptr;
  explicit Device(size_t n) { RINGGRAD_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float))); }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};

using bench::seeded_values;

int64_t count_wrong(const std::vector<float>& got, const std::vector<float>& want, int64_t k) {
  const double tol = 1e-6 + 3e-7 * static_cast<double>(k);
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(diff <= tol * (1.0 + std::fabs(static_cast<double>(want[i]))))) ++wrong;
  }
  return wrong;
}

// Median milliseconds per launch of fn() on `stream`.
template <typename F>
double gpu_ms_per_call(F&& fn, cudaStream_t stream, const Options& opt) {
  for (int i = 0; i < opt.warmup; ++i) fn();  // never timed
  RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  RINGGRAD_CUDA_CHECK(cudaEventCreate(&start));
  RINGGRAD_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int r = 0; r < opt.reps; ++r) {
    RINGGRAD_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < opt.iters; ++i) fn();
    RINGGRAD_CUDA_CHECK(cudaEventRecord(stop, stream));
    RINGGRAD_CUDA_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0;
    RINGGRAD_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    ms.push_back(elapsed / opt.iters);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return bench::median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);

  try {
    if (rg::cuda_device_count() == 0) {
      std::fprintf(stderr, "bench_gemm_cuda: no CUDA GPU (cuda_device_count() is 0); nothing to measure\n");
      return 2;
    }
    cudaDeviceProp prop{};
    RINGGRAD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    RINGGRAD_CUDA_CHECK(cudaSetDevice(0));

    // A large MLP (784-4096-4096-10, batch 4096) and a small one (784-1024, batch 256):
    // forward y = x W^T (NT), backward dx = dy W (NN) and dW = dy^T x (TN).
    std::vector<Shape> shapes = {
        {"square", 1024, 1024, 1024, false, false}, {"square", 2048, 2048, 2048, false, false},
        {"square", 4096, 4096, 4096, false, false}, {"mlp-fwd", 256, 1024, 784, false, true},
        {"mlp-fwd", 4096, 4096, 784, false, true},  {"mlp-fwd", 4096, 4096, 4096, false, true},
        {"mlp-fwd", 4096, 10, 4096, false, true},   {"mlp-dx", 4096, 784, 4096, false, false},
        {"mlp-dw", 4096, 4096, 4096, true, false},  {"mlp-dw", 4096, 784, 4096, true, false},
    };
    if (opt.quick) shapes.resize(2);
    if (opt.shape[0] > 0) shapes = {{"shape", opt.shape[0], opt.shape[1], opt.shape[2], false, false}};
    const bool run_native = opt.impl != "cublas", run_cublas = opt.impl != "native";

    cudaStream_t stream;
    RINGGRAD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasHandle_t handle;
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw rg::Error("cublasCreate failed");
    cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH);  // true float32: no TF32

    bench::Table table("gemm", {{"shape", "", 8, true},
                                {"m", "", 6},
                                {"n", "", 6},
                                {"k", "", 6},
                                {"op", "", 3, true},
                                {"native", "us", 9},
                                {"native", "GFLOP/s", 9},
                                {"cublas", "GFLOP/s", 9},
                                {"native/cublas", "%", 13},
                                {"native-1blk", "GFLOP/s", 11},
                                {"cpu", "GFLOP/s", 8},
                                {"#wrong", "", 7}});
    int64_t total_wrong = 0;
    for (const Shape& s : shapes) {
      const int64_t a_rows = s.trans_a ? s.k : s.m, a_cols = s.trans_a ? s.m : s.k;
      const int64_t b_rows = s.trans_b ? s.n : s.k, b_cols = s.trans_b ? s.k : s.n;
      const std::vector<float> a = seeded_values(static_cast<size_t>(a_rows * a_cols), 1);
      const std::vector<float> b = seeded_values(static_cast<size_t>(b_rows * b_cols), 2);
      const size_t c_size = static_cast<size_t>(s.m * s.n);
      Device da(a.size()), db(b.size()), dc_native(c_size), dc_native1(c_size), dc_cublas(c_size);
      // Every copy goes through `stream` and waits for it: the kernels run on that non-blocking stream,
      // which a cudaMemcpy on the legacy default stream is not ordered with.
      RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(da.p, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
      RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(db.p, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
      RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(stream));

      rg::kernels::GemmArgs args;
      args.m = s.m, args.n = s.n, args.k = s.k;
      args.lda = a_cols, args.ldb = b_cols, args.ldc = s.n;
      args.trans_a = s.trans_a, args.trans_b = s.trans_b;
      args.a = da.p, args.b = db.p;
      rg::kernels::GemmArgs args_native = args, args_native1 = args, args_cublas = args;
      args_native.c = dc_native.p, args_native1.c = dc_native1.p, args_cublas.c = dc_cublas.p;

      const double ms_native =
          run_native ? gpu_ms_per_call([&] { rg::kernels::cuda::gemm_f32(args_native, stream); }, stream, opt) : NAN;
      // The same kernel with one resident 128x128 block per SM: no register spills, half the warps
      // (kernels/cuda/gemm.cu, "Registers"); the default is the faster of the two once measured.
      const double ms_native1 =
          run_native ? gpu_ms_per_call([&] { rg::kernels::cuda::gemm_f32(args_native1, stream, 1); }, stream, opt)
                     : NAN;
      const double ms_cublas =
          run_cublas
              ? gpu_ms_per_call([&] { rg::kernels::cuda::gemm_cublas_f32(args_cublas, stream, handle); }, stream, opt)
              : NAN;
      std::vector<float> got_native(c_size), got_cublas(c_size);
      RINGGRAD_CUDA_CHECK(
          cudaMemcpyAsync(got_native.data(), dc_native.p, c_size * sizeof(float), cudaMemcpyDeviceToHost, stream));
      RINGGRAD_CUDA_CHECK(
          cudaMemcpyAsync(got_cublas.data(), dc_cublas.p, c_size * sizeof(float), cudaMemcpyDeviceToHost, stream));
      RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(stream));
      int64_t wrong = run_native && run_cublas ? count_wrong(got_native, got_cublas, s.k) : 0;
      if (run_native) {
        std::vector<float> got_native1(c_size);
        RINGGRAD_CUDA_CHECK(
            cudaMemcpyAsync(got_native1.data(), dc_native1.p, c_size * sizeof(float), cudaMemcpyDeviceToHost, stream));
        RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(stream));
        wrong += count_wrong(got_native1, got_native, s.k);
      }

      const double flop = 2.0 * static_cast<double>(s.m) * s.n * s.k;
      double cpu_gflops = NAN;
      if (run_cublas && flop <= opt.cpu_max_gflop * 1e9) {
        std::vector<float> host_c(c_size);
        rg::kernels::GemmArgs host = args;
        host.a = a.data(), host.b = b.data(), host.c = host_c.data();
        rg::kernels::Backend& cpu = rg::kernels::backend_for(rg::DeviceKind::CPU);
        const auto ns = bench::time_per_call([&] { cpu.gemm(host, nullptr); }, opt.quick ? 2 : 3, 0.2);
        cpu_gflops = flop / bench::median(ns);
        wrong += count_wrong(got_cublas, host_c, s.k);
      }
      total_wrong += wrong;
      const char* op = s.trans_a ? (s.trans_b ? "TT" : "TN") : (s.trans_b ? "NT" : "NN");
      table.add_row({s.name, std::to_string(s.m), std::to_string(s.n), std::to_string(s.k), op,
                     bench::fmt(ms_native * 1e3, 1), bench::fmt(flop / (ms_native * 1e6), 0),
                     bench::fmt(flop / (ms_cublas * 1e6), 0), bench::fmt(100.0 * ms_cublas / ms_native, 1),
                     bench::fmt(flop / (ms_native1 * 1e6), 0), bench::fmt(cpu_gflops, 0), std::to_string(wrong)});
    }
    cublasDestroy(handle);
    cudaStreamDestroy(stream);

    std::printf(
        "# ringgrad bench_gemm_cuda  device=\"%s\"  sms=%d  dtype=float32  warmup=%d  iters=%d  reps=%d  "
        "commit=%s\n",
        prop.name, prop.multiProcessorCount, opt.warmup, opt.iters, opt.reps, RINGGRAD_BENCH_COMMIT);
    std::printf(
        "# C = op(A) op(B), alpha=1 beta=0, no epilogue; cublas = SGEMM, CUBLAS_DEFAULT_MATH (no TF32);\n"
        "# cpu = the CPU backend's Eigen GEMM (only up to %.1f GFLOP per product); H200 fp32 peak ~67000 "
        "GFLOP/s\n#\n",
        opt.cpu_max_gflop);
    table.print(stdout);
    if (total_wrong > 0) std::printf("# WRONG RESULTS: %lld elements disagree\n", static_cast<long long>(total_wrong));
    if (!opt.json.empty() && !bench::write_json(opt.json, "bench_gemm_cuda",
                                                {{"device", prop.name},
                                                 {"commit", RINGGRAD_BENCH_COMMIT},
                                                 {"warmup", std::to_string(opt.warmup)},
                                                 {"iters", std::to_string(opt.iters)},
                                                 {"reps", std::to_string(opt.reps)}},
                                                {&table})) {
      std::fprintf(stderr, "bench_gemm_cuda: cannot write %s\n", opt.json.c_str());
      return 1;
    }
    return total_wrong > 0 ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm_cuda: %s\n", e.what());
    return 1;
  }
}
