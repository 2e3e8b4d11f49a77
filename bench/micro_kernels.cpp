// bench/micro_kernels.cpp: Google Benchmark microbenchmarks of ringgrad's CPU kernels, each called
// through the public API (<ringgrad/ringgrad.h>, float32) and, where a plain-Eigen equivalent exists,
// raced against it in the same run.
//
//   bench_micro                                    # the console table
//   bench_micro --benchmark_format=json            # the JSON bench/dp_vs_ddp embeds under "micro"
//   bench_micro --benchmark_filter='^gemm/' --benchmark_min_time=0.05 --benchmark_out=micro.json
//
// Google Benchmark's own flags are the only flags. With Debian's libbenchmark 1.7,
// --benchmark_min_time takes plain seconds (0.05); the "0.05s" spelling arrived in 1.8.
//
// One thread: ringgrad::set_num_threads(1) and Eigen::setNbThreads(1), so both sides use one core
// and the numbers compare per core (the machines this runs on share their few cores). Times are
// Google Benchmark's default, process CPU time (page faults of fresh outputs included, since the
// kernel's share counts); the rates (FLOP/s, bytes_per_second, items_per_second) divide by it.
//
// Names are family/implementation/sizes; each family's budget per call (float32, 4 B an element):
//   gemm/{ringgrad_matmul,eigen}/m:M/k:K/n:N   C[M,N] = A[M,K] B[K,N]: 2*M*N*K FLOPs against
//       4*(M*K + K*N + M*N) bytes -- M/6 FLOP/byte when square, compute-bound from about 64 on.
//       Counter FLOP/s. matmul allocates C on every call; Eigen writes into a preallocated C
//       (c.noalias() = a * b, column-major MatrixXf). Shapes: square 128/512/1024, an odd non-square
//       257x769 . 769x383, and the MLP's first layer, 256x784 . 784x1024.
//   elementwise/{ringgrad,eigen}_{add,mul,relu}/n:N   add and mul read 8 B and write 4 B per element,
//       relu reads 4 B and writes 4 B; 1 FLOP per element, so memory-bound: judge bytes_per_second
//       against the machine's copy bandwidth. Both read the same inputs. ringgrad allocates its output
//       on every call (for 16M floats, 64 MB: fresh pages each time); Eigen writes a preallocated array.
//   xent/ringgrad_{forward,forward_backward}/rows:B/classes:C   the fused softmax-cross-entropy
//       (core/ops/loss.cpp, kernels/cpu/softmax.cpp), mean reduction. Forward reads the logits (4C B)
//       and the label (8 B) and writes the probabilities kept for backward (4C B) and the row loss
//       (4 B): 8C+12 B and about 4C FLOPs (max, exp, sum, scale) per row -- bound by exp's
//       throughput. Backward reads probs, label and dloss and writes dlogits: another 8C+12 B per
//       row; forward_backward is the two together plus the graph bookkeeping. items = rows.
//   overhead/add_1elem/{no_grad,requires_grad}   ns per call of add() on two 1-element tensors, the
//       dispatch cost of one op; with requires_grad the call also records an AddBackward node, freed
//       when the dropped output goes. items = ops.
//
// Every family checks its result once before timing (ringgrad against Eigen or a double-precision
// loop); a wrong result marks the benchmark as an error in the report and makes the exit status 1.
#include <benchmark/benchmark.h>
#include <ringgrad/ringgrad.h>

#include "bench_commit.h"  // RINGGRAD_BENCH_COMMIT, generated at build time

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace rg = ringgrad;

namespace {

int g_wrong = 0;  // benchmarks whose result check failed; non-zero makes main return 1

void fail(benchmark::State& state, const std::string& why) {
  ++g_wrong;
  state.SkipWithError(why.c_str());
}

// Keeps a result observable so the call producing it is not dropped.
void keep(const rg::Tensor& t) { benchmark::DoNotOptimize(t.impl()); }

// --- gemm -------------------------------------------------------------------------------------------

struct GemmShape {
  int64_t m, k, n;
};

std::string gemm_suffix(const GemmShape& s) {
  return "/m:" + std::to_string(s.m) + "/k:" + std::to_string(s.k) + "/n:" + std::to_string(s.n);
}

double gemm_flop(const GemmShape& s) { return 2.0 * double(s.m) * double(s.n) * double(s.k); }

// ringgrad's A, B as column-major Eigen matrices (same values), for the reference and the check.
Eigen::MatrixXf to_eigen(const rg::Tensor& t) {
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const std::vector<float> v = t.to_vector<float>();
  return Eigen::Map<const RowMajor>(v.data(), t.size(0), t.size(1));
}

void bm_gemm_ringgrad(benchmark::State& state, GemmShape s) {
  const rg::Tensor a = rg::randn({s.m, s.k}, rg::DType::f32, 1), b = rg::randn({s.k, s.n}, rg::DType::f32, 2);
  {  // check against Eigen: |c - ref| <= K u sum|a b| with u = 6e-8 (float32), |a b| ~ 1 for randn
    const Eigen::MatrixXf ref = to_eigen(a) * to_eigen(b);
    const Eigen::MatrixXf got = to_eigen(rg::matmul(a, b));
    const float tol = 4.0f * float(s.k) * 6e-8f * std::sqrt(float(s.k)) + 1e-5f;
    const float err = (got - ref).cwiseAbs().maxCoeff();
    if (!(err <= tol)) return fail(state, "matmul differs from Eigen by " + std::to_string(err));
  }
  for (auto _ : state) keep(rg::matmul(a, b));
  state.counters["FLOP/s"] = benchmark::Counter(gemm_flop(s) * double(state.iterations()), benchmark::Counter::kIsRate);
}

void bm_gemm_eigen(benchmark::State& state, GemmShape s) {
  const Eigen::MatrixXf a = Eigen::MatrixXf::Random(s.m, s.k), b = Eigen::MatrixXf::Random(s.k, s.n);
  Eigen::MatrixXf c(s.m, s.n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] = benchmark::Counter(gemm_flop(s) * double(state.iterations()), benchmark::Counter::kIsRate);
}

// --- elementwise ------------------------------------------------------------------------------------

enum class Elementwise { Add, Mul, Relu };

const char* elementwise_name(Elementwise op) {
  return op == Elementwise::Add ? "add" : op == Elementwise::Mul ? "mul" : "relu";
}

// Bytes one call moves per element: two reads and a write, or one of each for relu.
int64_t elementwise_bytes(Elementwise op) { return op == Elementwise::Relu ? 8 : 12; }

float elementwise_ref(Elementwise op, float x, float y) {
  return op == Elementwise::Add ? x + y : op == Elementwise::Mul ? x * y : (x > 0.0f ? x : 0.0f);
}

void set_elementwise_rates(benchmark::State& state, Elementwise op, int64_t n) {
  state.SetBytesProcessed(state.iterations() * n * elementwise_bytes(op));
  state.SetItemsProcessed(state.iterations() * n);
}

// The inputs x, y of n elements, drawn once per size and shared by ringgrad and Eigen (16M normal
// draws cost more than the benchmark itself). Cleared by main before the library shuts down.
std::map<int64_t, std::pair<rg::Tensor, rg::Tensor>> g_elementwise_inputs;

const std::pair<rg::Tensor, rg::Tensor>& elementwise_inputs(int64_t n) {
  auto it = g_elementwise_inputs.find(n);
  if (it == g_elementwise_inputs.end())
    it = g_elementwise_inputs
             .emplace(n, std::make_pair(rg::randn({n}, rg::DType::f32, 3), rg::randn({n}, rg::DType::f32, 4)))
             .first;
  return it->second;
}

void bm_elementwise_ringgrad(benchmark::State& state, Elementwise op, int64_t n) {
  const auto& [x, y] = elementwise_inputs(n);
  auto call = [&] {
    return op == Elementwise::Add ? rg::add(x, y) : op == Elementwise::Mul ? rg::mul(x, y) : rg::relu(x);
  };
  {  // exact: one float operation per element, as the reference does it
    const rg::Tensor z = call();
    const float *px = x.data<float>(), *py = y.data<float>(), *pz = z.data<float>();
    for (int64_t i = 0; i < n; i += 997)
      if (pz[i] != elementwise_ref(op, px[i], py[i]))
        return fail(state, std::string(elementwise_name(op)) + " wrong at element " + std::to_string(i));
  }
  for (auto _ : state) keep(call());
  set_elementwise_rates(state, op, n);
}

void bm_elementwise_eigen(benchmark::State& state, Elementwise op, int64_t n) {
  const auto& [xt, yt] = elementwise_inputs(n);
  const Eigen::Map<const Eigen::ArrayXf> x(xt.data<float>(), n), y(yt.data<float>(), n);
  Eigen::ArrayXf z = Eigen::ArrayXf::Zero(n);  // touched once here, so its pages exist before timing
  for (auto _ : state) {
    if (op == Elementwise::Add)
      z = x + y;
    else if (op == Elementwise::Mul)
      z = x * y;
    else
      z = x.max(0.0f);
    benchmark::DoNotOptimize(z.data());
    benchmark::ClobberMemory();
  }
  set_elementwise_rates(state, op, n);
}

// --- softmax-cross-entropy ----------------------------------------------------------------------------

// Mean cross-entropy of row-major logits in double: the check's reference.
double xent_ref(const std::vector<float>& x, const std::vector<int64_t>& labels, int64_t rows, int64_t c) {
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double max = x[r * c];
    for (int64_t j = 1; j < c; ++j) max = std::max(max, double(x[r * c + j]));
    double sum = 0.0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(double(x[r * c + j]) - max);
    total += max + std::log(sum) - x[r * c + labels[r]];
  }
  return total / double(rows);
}

void bm_xent(benchmark::State& state, int64_t rows, int64_t c, bool backward) {
  rg::Tensor logits = rg::randn({rows, c}, rg::DType::f32, 5);
  std::vector<int64_t> label_values(rows);
  std::mt19937 rng(6);
  for (auto& l : label_values) l = std::uniform_int_distribution<int64_t>(0, c - 1)(rng);
  const rg::Tensor labels = rg::from_vector(label_values, {rows});
  if (backward) logits.requires_grad_(true);
  auto step = [&] {
    rg::Tensor loss = rg::cross_entropy(logits, labels);
    if (backward) {
      logits.set_grad(rg::Tensor());  // as zero_grad(set_to_none): backward writes a fresh grad
      loss.backward();
    }
    return loss;
  };
  {  // loss against double precision; with backward, each row of the gradient sums to 0
    const double want = xent_ref(logits.to_vector<float>(), label_values, rows, c), got = step().item();
    if (!(std::fabs(got - want) <= 1e-5 * (1.0 + std::fabs(want))))
      return fail(state, "cross_entropy " + std::to_string(got) + ", want " + std::to_string(want));
    if (backward) {
      const std::vector<float> g = logits.grad().to_vector<float>();
      for (int64_t r = 0; r < rows; ++r) {
        double sum = 0.0;
        for (int64_t j = 0; j < c; ++j) sum += g[r * c + j];
        if (!(std::fabs(sum) <= 1e-6))
          return fail(state, "cross_entropy gradient row " + std::to_string(r) + " sums to " + std::to_string(sum));
      }
    }
  }
  for (auto _ : state) keep(step());
  const int64_t bytes_per_row = (backward ? 2 : 1) * (8 * c + 12);
  state.SetBytesProcessed(state.iterations() * rows * bytes_per_row);
  state.SetItemsProcessed(state.iterations() * rows);
}

// --- per-op overhead -----------------------------------------------------------------------------------

void bm_overhead_add(benchmark::State& state, bool requires_grad) {
  rg::Tensor a = rg::full({1}, 1.0), b = rg::full({1}, 2.0);
  a.requires_grad_(requires_grad);
  b.requires_grad_(requires_grad);
  {
    const rg::Tensor c = rg::add(a, b);
    if (c.item() != 3.0 || c.requires_grad() != requires_grad) return fail(state, "add of 1-element tensors is wrong");
  }
  for (auto _ : state) keep(rg::add(a, b));
  state.SetItemsProcessed(state.iterations());
}

void register_all() {
  const std::vector<GemmShape> shapes = {
      {128, 128, 128}, {512, 512, 512}, {1024, 1024, 1024}, {257, 769, 383}, {256, 784, 1024}};
  // Per shape: ringgrad, then Eigen right after it, so the pair is measured under the same conditions.
  for (const GemmShape& s : shapes) {
    benchmark::RegisterBenchmark(("gemm/ringgrad_matmul" + gemm_suffix(s)).c_str(), bm_gemm_ringgrad, s)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("gemm/eigen" + gemm_suffix(s)).c_str(), bm_gemm_eigen, s)
        ->Unit(benchmark::kMicrosecond);
  }
  for (Elementwise op : {Elementwise::Add, Elementwise::Mul, Elementwise::Relu})
    for (int64_t n : {int64_t(1) << 20, int64_t(1) << 24}) {
      const std::string suffix = std::string(elementwise_name(op)) + "/n:" + std::to_string(n);
      benchmark::RegisterBenchmark(("elementwise/ringgrad_" + suffix).c_str(), bm_elementwise_ringgrad, op, n)
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("elementwise/eigen_" + suffix).c_str(), bm_elementwise_eigen, op, n)
          ->Unit(benchmark::kMicrosecond);
    }
  const std::vector<std::pair<int64_t, int64_t>> xent_shapes = {{256, 10}, {4096, 1000}};  // (rows, classes)
  for (const auto& [rows, c] : xent_shapes)
    for (bool backward : {false, true}) {
      const std::string name = std::string("xent/ringgrad_") + (backward ? "forward_backward" : "forward") +
                               "/rows:" + std::to_string(rows) + "/classes:" + std::to_string(c);
      benchmark::RegisterBenchmark(name.c_str(), bm_xent, rows, c, backward)->Unit(benchmark::kMicrosecond);
    }
  benchmark::RegisterBenchmark("overhead/add_1elem/no_grad", bm_overhead_add, false);
  benchmark::RegisterBenchmark("overhead/add_1elem/requires_grad", bm_overhead_add, true);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  try {
    // One thread on both sides (see the top of the file).
    rg::set_num_threads(1);
    Eigen::setNbThreads(1);
    benchmark::AddCustomContext("ringgrad_version", RINGGRAD_VERSION_STRING);
#ifdef RINGGRAD_BENCH_COMMIT
    benchmark::AddCustomContext("ringgrad_commit", RINGGRAD_BENCH_COMMIT);
#endif
    benchmark::AddCustomContext("threads", "1 (ringgrad::set_num_threads(1), Eigen::setNbThreads(1))");
    benchmark::AddCustomContext("dtype", "float32");
    benchmark::AddCustomContext("eigen_version",
                                std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
                                    std::to_string(EIGEN_MINOR_VERSION) + " " + Eigen::SimdInstructionSetsInUse());
    register_all();
    benchmark::RunSpecifiedBenchmarks();
    g_elementwise_inputs.clear();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_micro: %s\n", e.what());
    benchmark::Shutdown();
    return 1;
  }
  benchmark::Shutdown();
  if (g_wrong) std::fprintf(stderr, "bench_micro: %d benchmark(s) got a wrong result (see error_message)\n", g_wrong);
  return g_wrong ? 1 : 0;
}
