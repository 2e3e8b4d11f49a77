// bench/micro_cuda.cpp: Google Benchmark microbenchmarks of ringgrad's CUDA kernels, called through
// their raw-pointer launchers (the library's private kernels/cuda/*.h, as bench_gemm_cuda.cpp does),
// against cuBLAS or a device-to-device copy in the same run.
//
//   bench_micro_cuda                                                   # the console table
//   bench_micro_cuda --benchmark_format=json --benchmark_out=micro_cuda.json
//   bench_micro_cuda --benchmark_filter='^gemm/' --benchmark_min_time=0.1   # 1.7: plain seconds
//
// Google Benchmark's own flags are the only flags. Without a GPU it prints one line and exits 2.
//
// Timing: GPU time, from cudaEvents around kLaunchesPerIteration back-to-back launches on one stream
// (divided by that count), reported with state.SetIterationTime and ->UseManualTime(), so every
// time and rate below is device time per launch. kWarmupLaunches untimed launches come first
// (libbenchmark 1.7 has no warm-up option of its own).
//
// Names are family/implementation/sizes; each family's budget per launch (float32):
//   gemm/{cuda_native,cublas}/m:M/k:K/n:N   C[M,N] = A[M,K] B[K,N] (row-major, no transposes):
//       2*M*N*K FLOPs against 4*(M*K + K*N + M*N) bytes, M/6 FLOP/byte when square, so compute-bound
//       beyond a few hundred on an H200 (~67 TFLOP/s float32 without tensor cores, 4.8 TB/s).
//       Counter FLOP/s. cuBLAS is cublasSgemm with CUBLAS_DEFAULT_MATH (true float32, no TF32),
//       through kernels/cuda/gemm_cublas.cu. The CPU file's shapes plus 4096^3, where the GPU is full.
//   elementwise/cuda_{add,mul,relu,memcpy_d2d}/n:N   add and mul read 8 B and write 4 B per element,
//       relu and the copy read 4 B and write 4 B: memory-bound, judge bytes_per_second against
//       DRAM bandwidth (H200: 4.8 TB/s) once the 12 B*N working set is well above L2 (~50 MB), i.e.
//       at N = 16M; cudaMemcpyAsync device-to-device is the yardstick.
//   xent/cuda_{forward,backward}/rows:B/classes:C   the fused softmax-cross-entropy kernels
//       (kernels/cuda/softmax.cu). Forward reads logits (4C B) and the label (8 B) and writes probs
//       (4C B) and the row loss (4 B): 8C+12 B per row. Backward reads probs, label and the mean's
//       dloss (4 B, stride 0) and writes dlogits: 8C+12 B per row. items = rows.
//
// Every benchmark checks its result once before timing (native GEMM against cuBLAS with a tolerance
// growing with K, elementwise exactly against the host, the loss against double precision on the
// host); a wrong result marks the benchmark as an error in the report and makes the exit status 1.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <ringgrad/ringgrad.h>

#include "bench_util.h"  // seeded_values; RINGGRAD_BENCH_COMMIT

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <ringgrad/kernels/backend.h>
#include "core/base/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/softmax.h"

namespace rg = ringgrad;

namespace {

constexpr int kWarmupLaunches = 3;
constexpr int kLaunchesPerIteration = 10;

int g_wrong = 0;  // benchmarks whose result check failed (or threw); non-zero makes main return 1
cudaStream_t g_stream = nullptr;
cublasHandle_t g_cublas = nullptr;

void fail(benchmark::State& state, const std::string& why) {
  ++g_wrong;
  state.SkipWithError(why.c_str());
}

// A device buffer of n elements of T, freed on scope exit.
template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) {
    RINGGRAD_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  }
  // Copies go through g_stream, where the kernels run, and wait for it: a cudaMemcpy on the legacy
  // default stream is not ordered with work on a non-blocking stream.
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    if (n == 0) return;
    RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice, g_stream));
    RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(g_stream));
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::vector<T> to_host() const {
    std::vector<T> host(n);
    if (n == 0) return host;
    RINGGRAD_CUDA_CHECK(cudaMemcpyAsync(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, g_stream));
    RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(g_stream));
    return host;
  }
};

using bench::seeded_values;

// Runs the timed loop: per iteration, kLaunchesPerIteration launches between two events, and the
// device time per launch as the iteration's time.
template <typename Launch>
void time_launches(benchmark::State& state, Launch&& launch) {
  for (int i = 0; i < kWarmupLaunches; ++i) launch();
  RINGGRAD_CUDA_CHECK(cudaStreamSynchronize(g_stream));
  cudaEvent_t start, stop;
  RINGGRAD_CUDA_CHECK(cudaEventCreate(&start));
  RINGGRAD_CUDA_CHECK(cudaEventCreate(&stop));
  for (auto _ : state) {
    RINGGRAD_CUDA_CHECK(cudaEventRecord(start, g_stream));
    for (int i = 0; i < kLaunchesPerIteration; ++i) launch();
    RINGGRAD_CUDA_CHECK(cudaEventRecord(stop, g_stream));
    RINGGRAD_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    RINGGRAD_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms * 1e-3 / kLaunchesPerIteration);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

// Runs body(state); a ringgrad::Error (a failed CUDA call) becomes the benchmark's error.
template <typename Body>
void guarded(benchmark::State& state, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    fail(state, e.what());
  }
}

// --- gemm -------------------------------------------------------------------------------------------

struct GemmShape {
  int64_t m, k, n;
};

enum class GemmImpl { Native, Cublas };

void bm_gemm(benchmark::State& state, GemmShape s, GemmImpl impl) {
  guarded(state, [&] {
    const std::vector<float> a = seeded_values(size_t(s.m * s.k), 1), b = seeded_values(size_t(s.k * s.n), 2);
    DeviceBuffer<float> da(a), db(b), dc(size_t(s.m * s.n)), dc_ref(size_t(s.m * s.n));
    rg::kernels::GemmArgs args;
    args.m = s.m, args.n = s.n, args.k = s.k;
    args.a = da.p, args.lda = s.k;
    args.b = db.p, args.ldb = s.n;
    args.c = dc.p, args.ldc = s.n;
    rg::kernels::GemmArgs ref_args = args;
    ref_args.c = dc_ref.p;
    auto launch = [&] {
      if (impl == GemmImpl::Native)
        rg::kernels::cuda::gemm_f32(args, g_stream);
      else
        rg::kernels::cuda::gemm_cublas_f32(args, g_stream, g_cublas);
    };
    // Native against cuBLAS; cuBLAS itself against a few double-precision dot products.
    launch();
    rg::kernels::cuda::gemm_cublas_f32(ref_args, g_stream, g_cublas);
    const std::vector<float> got = dc.to_host(), want = dc_ref.to_host();
    const double tol = 1e-6 + 3e-7 * double(s.k);
    int64_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (!(std::fabs(double(got[i]) - want[i]) <= tol * (1.0 + std::fabs(double(want[i]))))) ++wrong;
    for (int64_t i = 0; i < s.m; i += std::max<int64_t>(1, s.m / 7)) {
      const int64_t j = (i * 31) % s.n;
      double ref = 0.0;
      for (int64_t p = 0; p < s.k; ++p) ref += double(a[i * s.k + p]) * b[p * s.n + j];
      if (!(std::fabs(want[i * s.n + j] - ref) <= tol * (1.0 + std::fabs(ref)))) ++wrong;
    }
    if (wrong) return fail(state, std::to_string(wrong) + " elements of C wrong");
    time_launches(state, launch);
    state.counters["FLOP/s"] = benchmark::Counter(
        2.0 * double(s.m) * double(s.n) * double(s.k) * double(state.iterations()), benchmark::Counter::kIsRate);
  });
}

// --- elementwise ------------------------------------------------------------------------------------

enum class Elementwise { Add, Mul, Relu, Copy };

const char* elementwise_name(Elementwise op) {
  switch (op) {
    case Elementwise::Add: return "add";
    case Elementwise::Mul: return "mul";
    case Elementwise::Relu: return "relu";
    default: return "memcpy_d2d";
  }
}

void bm_elementwise(benchmark::State& state, Elementwise op, int64_t n) {
  guarded(state, [&] {
    const std::vector<float> x = seeded_values(size_t(n), 3), y = seeded_values(size_t(n), 4);
    DeviceBuffer<float> dx(x), dy(y), dz(static_cast<size_t>(n));
    rg::StridedDesc a, b;
    a.data = dx.p, b.data = dy.p;
    a.ndim = b.ndim = 1;
    a.shape[0] = b.shape[0] = n;
    a.strides[0] = b.strides[0] = 1;
    auto launch = [&] {
      switch (op) {
        case Elementwise::Add:
          rg::kernels::cuda::binary(rg::kernels::BinaryOp::Add, rg::DType::f32, a, b, dz.p, g_stream);
          break;
        case Elementwise::Mul:
          rg::kernels::cuda::binary(rg::kernels::BinaryOp::Mul, rg::DType::f32, a, b, dz.p, g_stream);
          break;
        case Elementwise::Relu:
          rg::kernels::cuda::unary(rg::kernels::UnaryOp::Relu, rg::DType::f32, dx.p, dz.p, n, 0.0, g_stream);
          break;
        case Elementwise::Copy:
          RINGGRAD_CUDA_CHECK(
              cudaMemcpyAsync(dz.p, dx.p, size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice, g_stream));
          break;
      }
    };
    launch();
    const std::vector<float> z = dz.to_host();
    for (int64_t i = 0; i < n; ++i) {
      const float want = op == Elementwise::Add    ? x[i] + y[i]
                         : op == Elementwise::Mul  ? x[i] * y[i]
                         : op == Elementwise::Relu ? (x[i] > 0.0f ? x[i] : 0.0f)
                                                   : x[i];
      if (z[i] != want)
        return fail(state, std::string(elementwise_name(op)) + " wrong at element " + std::to_string(i));
    }
    time_launches(state, launch);
    const int64_t bytes_per_element = op == Elementwise::Add || op == Elementwise::Mul ? 12 : 8;
    state.SetBytesProcessed(state.iterations() * n * bytes_per_element);
    state.SetItemsProcessed(state.iterations() * n);
  });
}

// --- softmax-cross-entropy ----------------------------------------------------------------------------

void bm_xent(benchmark::State& state, int64_t rows, int64_t c, bool backward) {
  guarded(state, [&] {
    const std::vector<float> x = seeded_values(size_t(rows * c), 5);
    std::vector<int64_t> labels(static_cast<size_t>(rows));
    std::mt19937 rng(6);
    for (auto& l : labels) l = std::uniform_int_distribution<int64_t>(0, c - 1)(rng);
    const std::vector<float> dloss_host = {1.0f};
    DeviceBuffer<float> dlogits_in(x), dloss_rows(static_cast<size_t>(rows)), dprobs(size_t(rows * c)),
        ddloss(dloss_host), dgrad(size_t(rows * c));
    DeviceBuffer<int64_t> dlabels(labels);
    const double scale = 1.0 / double(rows);  // the mean reduction's backward
    auto forward = [&] {
      rg::kernels::cuda::cross_entropy_forward(rg::DType::f32, dlogits_in.p, dlabels.p, dloss_rows.p, dprobs.p, rows, c,
                                               0.0, g_stream);
    };
    auto backward_launch = [&] {
      rg::kernels::cuda::cross_entropy_backward(rg::DType::f32, dprobs.p, dlabels.p, ddloss.p, /*dloss_stride=*/0,
                                                scale, dgrad.p, rows, c, 0.0, g_stream);
    };
    forward();
    backward_launch();
    // Each row's loss against double precision; each row of the gradient sums to 0.
    const std::vector<float> loss = dloss_rows.to_host(), grad = dgrad.to_host();
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * c;
      double max = xr[0], sum = 0.0, gsum = 0.0;
      for (int64_t j = 1; j < c; ++j) max = std::max(max, double(xr[j]));
      for (int64_t j = 0; j < c; ++j) sum += std::exp(double(xr[j]) - max), gsum += grad[r * c + j];
      const double want = max + std::log(sum) - xr[labels[r]];
      if (!(std::fabs(loss[r] - want) <= 1e-5 * (1.0 + std::fabs(want))) || !(std::fabs(gsum) <= 1e-6))
        return fail(state, "cross_entropy wrong at row " + std::to_string(r));
    }
    if (backward)
      time_launches(state, backward_launch);
    else
      time_launches(state, forward);
    state.SetBytesProcessed(state.iterations() * rows * (8 * c + 12));
    state.SetItemsProcessed(state.iterations() * rows);
  });
}

void register_all() {
  const std::vector<GemmShape> shapes = {{128, 128, 128},    {512, 512, 512}, {1024, 1024, 1024},
                                         {4096, 4096, 4096}, {257, 769, 383}, {256, 784, 1024}};
  for (const GemmShape& s : shapes) {
    const std::string suffix = "/m:" + std::to_string(s.m) + "/k:" + std::to_string(s.k) + "/n:" + std::to_string(s.n);
    benchmark::RegisterBenchmark(("gemm/cuda_native" + suffix).c_str(), bm_gemm, s, GemmImpl::Native)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("gemm/cublas" + suffix).c_str(), bm_gemm, s, GemmImpl::Cublas)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (Elementwise op : {Elementwise::Add, Elementwise::Mul, Elementwise::Relu, Elementwise::Copy})
    for (int64_t n : {int64_t(1) << 20, int64_t(1) << 24}) {
      const std::string name = std::string("elementwise/cuda_") + elementwise_name(op) + "/n:" + std::to_string(n);
      benchmark::RegisterBenchmark(name.c_str(), bm_elementwise, op, n)->UseManualTime()->Unit(benchmark::kMicrosecond);
    }
  const std::vector<std::pair<int64_t, int64_t>> xent_shapes = {{256, 10}, {4096, 1000}};  // (rows, classes)
  for (const auto& [rows, c] : xent_shapes)
    for (bool backward : {false, true}) {
      const std::string name = std::string("xent/cuda_") + (backward ? "backward" : "forward") +
                               "/rows:" + std::to_string(rows) + "/classes:" + std::to_string(c);
      benchmark::RegisterBenchmark(name.c_str(), bm_xent, rows, c, backward)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;

  // Asked first and directly: with no GPU or no driver, the one line below instead of a failed call.
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_micro_cuda: no CUDA GPU (cudaGetDeviceCount: %s, %d devices); nothing to measure\n",
                 err == cudaSuccess ? "no error" : cudaGetErrorString(err), devices);
    return 2;
  }
  try {
    cudaDeviceProp prop{};
    RINGGRAD_CUDA_CHECK(cudaSetDevice(0));
    RINGGRAD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    int runtime_version = 0;
    RINGGRAD_CUDA_CHECK(cudaRuntimeGetVersion(&runtime_version));
    RINGGRAD_CUDA_CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    if (cublasCreate(&g_cublas) != CUBLAS_STATUS_SUCCESS) throw rg::Error("bench_micro_cuda: cublasCreate failed");
    cublasSetMathMode(g_cublas, CUBLAS_DEFAULT_MATH);  // true float32: no TF32

    benchmark::AddCustomContext("ringgrad_version", RINGGRAD_VERSION_STRING);
#ifdef RINGGRAD_BENCH_COMMIT
    benchmark::AddCustomContext("ringgrad_commit", RINGGRAD_BENCH_COMMIT);
#endif
    benchmark::AddCustomContext("device", std::string(prop.name) + ", " + std::to_string(prop.multiProcessorCount) +
                                              " SMs, sm_" + std::to_string(prop.major) + std::to_string(prop.minor));
    benchmark::AddCustomContext("cuda_runtime", std::to_string(runtime_version));
    benchmark::AddCustomContext("timing", "cudaEvents around " + std::to_string(kLaunchesPerIteration) +
                                              " launches per iteration, per-launch GPU time (manual time)");
    benchmark::AddCustomContext("dtype", "float32");
    register_all();
    benchmark::RunSpecifiedBenchmarks();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_micro_cuda: %s\n", e.what());
    return 1;
  }
  benchmark::Shutdown();
  cublasDestroy(g_cublas);
  cudaStreamDestroy(g_stream);
  if (g_wrong) std::fprintf(stderr, "bench_micro_cuda: %d benchmark(s) failed (see error_message)\n", g_wrong);
  return g_wrong ? 1 : 0;
}
