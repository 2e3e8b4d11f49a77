// bench/bench_gemm_cpu.cpp: float32 GEMM on the CPU in GFLOP/s -- ringgrad's backend as dispatched,
// its packed kernel at every vector level the CPU has, and PyTorch's torch.mm (OpenBLAS at its best
// core, bench/torch_gemm.py) in the same run.
//
//   build/bench/bench_gemm_cpu [--threads 1] [--shapes 256x1024x784:NT,...] [--json FILE]
//
// The default shapes are the products of one training step of the MLP 784-1024-1024-10 at batch
// 256 (bench_mlp_step): forward x W^T (NT), backward dY W (NN) and dY^T x (TN), plus square and odd
// ones. "ringgrad" is what the library runs (kernels/cpu/gemm.cpp: the packed kernel of cpu_isa(),
// or Eigen where there is none); RINGGRAD_CPU_ISA=baseline shows Eigen's portable build instead.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/sgemm.h"
#include "tools/cli/flags.h"
#include <ringgrad/ringgrad.h>

namespace rg = ringgrad;
namespace cpu = ringgrad::kernels::cpu;

namespace {

struct Shape {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  std::string name() const {
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + ":" + (trans_a ? "T" : "N") +
           (trans_b ? "T" : "N");
  }
};

// "256x1024x784:NT" -> a shape; false when the text is not one.
bool parse_shape(const std::string& text, Shape& s) {
  long long m = 0, n = 0, k = 0;
  char ta = 0, tb = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), "%lldx%lldx%lld:%c%c%n", &m, &n, &k, &ta, &tb, &used) != 5 ||
      used != static_cast<int>(text.size()))
    return false;
  if (m < 1 || n < 1 || k < 1 || m > 65536 || n > 65536 || k > 65536) return false;
  if ((ta != 'N' && ta != 'T') || (tb != 'N' && tb != 'T')) return false;
  s = {m, n, k, ta == 'T', tb == 'T'};
  return true;
}

struct Options {
  std::vector<Shape> shapes;
  int threads = 1;
  int reps = 7;
  bool torch = true;
  std::string python = "/usr/bin/python3";
  std::string json;
};

const char* kDefaultShapes =
    "256x1024x784:NT,256x1024x1024:NT,256x1024x1024:NN,256x784x1024:NN,1024x784x256:TN,1024x1024x256:TN,"
    "512x512x512:NN,1024x1024x1024:NN,257x383x129:TT";

Options parse(int argc, char** argv) {
  Options opt;
  std::string shapes = kDefaultShapes;
  rg::cli::FlagParser flags("bench_gemm_cpu",
                            "float32 GEMM on the CPU in GFLOP/s: ringgrad (as dispatched, and its packed kernel at "
                            "each vector level) next to PyTorch's torch.mm.");
  flags.add_custom(
      "--shapes", "LIST", "products to time, comma-separated MxNxK:AB (A, B: N as stored, T transposed)",
      "a comma-separated list such as 256x1024x784:NT,512x512x512:NN (sizes 1 to 65536)",
      [&shapes](const std::string& text) {
        std::stringstream in(text);
        int count = 0;
        Shape s;
        for (std::string item; std::getline(in, item, ',');) {
          if (!parse_shape(item, s)) return false;
          ++count;
        }
        if (count == 0 || text.back() == ',') return false;
        shapes = text;
        return true;
      },
      [&shapes] { return shapes; });
  flags.add_int("--threads", &opt.threads, "threads for ringgrad (set_num_threads) and torch.set_num_threads", 1, 4096);
  flags.add_int("--reps", &opt.reps, "timed repetitions per measurement, of which the median is reported", 1, 1000);
  bool no_torch = false;
  flags.add_bool("--no-torch", &no_torch, "skip the PyTorch reference");
  flags.add_string("--python", &opt.python, "interpreter for bench/torch_gemm.py").metavar("PATH");
  flags.add_string("--json", &opt.json, "also write the rows as JSON").metavar("FILE");
  flags.parse(argc, argv);
  if (const std::string why = bench::unwritable_output({{"--json", opt.json}}); !why.empty())
    flags.exit_with_usage(why);
  opt.torch = !no_torch;
  std::stringstream in(shapes);
  for (std::string item; std::getline(in, item, ',');) {
    Shape s;
    parse_shape(item, s);
    opt.shapes.push_back(s);
  }
  return opt;
}

// Operands of one shape as a caller stores them (row-major; transposed ones stored k x m / n x k).
struct Operands {
  std::vector<float> a, b, c;
  explicit Operands(const Shape& s)
      : a(bench::seeded_values(static_cast<size_t>(s.m * s.k), 1)),
        b(bench::seeded_values(static_cast<size_t>(s.k * s.n), 2)),
        c(static_cast<size_t>(s.m * s.n)) {}
};

rg::kernels::GemmArgs backend_args(const Shape& s, Operands& o) {
  rg::kernels::GemmArgs g;
  g.m = s.m, g.n = s.n, g.k = s.k;
  g.a = o.a.data(), g.lda = s.trans_a ? s.m : s.k, g.trans_a = s.trans_a;
  g.b = o.b.data(), g.ldb = s.trans_b ? s.k : s.n, g.trans_b = s.trans_b;
  g.c = o.c.data(), g.ldc = s.n;
  return g;
}

cpu::SgemmProblem packed_problem(const Shape& s, Operands& o) {
  cpu::SgemmProblem p;
  p.m = s.m, p.n = s.n, p.k = s.k;
  p.a = o.a.data(), p.lda = s.trans_a ? s.m : s.k, p.trans_a = s.trans_a;
  p.b = o.b.data(), p.ldb = s.trans_b ? s.k : s.n, p.trans_b = s.trans_b;
  p.c = o.c.data(), p.ldc = s.n;
  return p;
}

// "median min max" of a PyTorch measurement, in ns; NaNs when absent.
std::vector<double> torch_ns(const std::map<std::string, std::string>& kv, const std::string& key) {
  std::vector<double> v(3, NAN);
  const auto it = kv.find(key);
  if (it == kv.end()) return v;
  std::istringstream in(it->second);
  for (double& x : v) in >> x;
  return v;
}

std::string spread(double lo, double hi) {
  return std::isnan(lo) || std::isnan(hi) ? "-" : bench::fmt(lo, 1) + "-" + bench::fmt(hi, 1);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const double min_time = 0.05;
  try {
    rg::set_num_threads(opt.threads);
    rg::kernels::Backend& host = rg::kernels::backend_for(rg::DeviceKind::CPU, "bench_gemm_cpu");
    std::vector<cpu::Isa> levels;
    for (cpu::Isa isa : {cpu::Isa::avx2, cpu::Isa::avx512})
      if (static_cast<int>(isa) <= static_cast<int>(cpu::cpu_isa_supported()) && cpu::sgemm_packed_available(isa))
        levels.push_back(isa);

    struct Row {
      Shape s;
      std::vector<double> dispatched;        // ns per call, one per repetition
      std::map<cpu::Isa, double> per_level;  // median ns
    };
    std::vector<Row> rows;
    for (const Shape& s : opt.shapes) {
      std::fprintf(stderr, "bench_gemm_cpu: %s\n", s.name().c_str());
      Operands o(s);
      Row row{s, {}, {}};
      const rg::kernels::GemmArgs g = backend_args(s, o);
      row.dispatched = bench::time_per_call([&] { host.gemm(g, nullptr); }, opt.reps, min_time);
      for (cpu::Isa isa : levels) {
        const cpu::SgemmProblem p = packed_problem(s, o);
        row.per_level[isa] =
            bench::median(bench::time_per_call([&] { cpu::sgemm_packed(isa, p, opt.threads); }, opt.reps, min_time));
      }
      rows.push_back(row);
    }

    // PyTorch after ringgrad, so the two never share the cores.
    std::string torch_why = "skipped (--no-torch)";
    std::map<std::string, std::string> pt;
    if (opt.torch) {
      std::string shapes;
      for (const Shape& s : opt.shapes) shapes += (shapes.empty() ? "" : ",") + s.name();
      pt = bench::run_key_value_script(opt.python, std::string(RINGGRAD_BENCH_DIR) + "/torch_gemm.py",
                                       "--threads " + std::to_string(opt.threads) + " --reps " +
                                           std::to_string(opt.reps) + " --min-time " + std::to_string(min_time) +
                                           " --shapes " + shapes,
                                       torch_why);
    }

    std::vector<bench::Column> columns = {
        {"shape", "", 16, true}, {"threads", "", 7}, {"ringgrad", "GFLOP/s", 8}, {"rg spread", "GFLOP/s", 11}};
    for (cpu::Isa isa : levels) columns.push_back({std::string("packed ") + cpu::isa_name(isa), "GFLOP/s", 14});
    for (auto extra :
         std::vector<bench::Column>{{"pytorch", "GFLOP/s", 8}, {"pt spread", "GFLOP/s", 11}, {"ratio", "rg/pt", 6}})
      columns.push_back(extra);
    bench::Table table("gemm", columns);
    for (const Row& r : rows) {
      const double flop = 2.0 * static_cast<double>(r.s.m) * static_cast<double>(r.s.n) * static_cast<double>(r.s.k);
      const double rg_med = bench::median(r.dispatched);
      const auto [fast, slow] = std::minmax_element(r.dispatched.begin(), r.dispatched.end());
      const std::vector<double> t = torch_ns(pt, "gemm_" + r.s.name() + "_ns");
      std::vector<std::string> cells = {r.s.name(), std::to_string(opt.threads), bench::fmt(flop / rg_med),
                                        spread(flop / *slow, flop / *fast)};
      for (cpu::Isa isa : levels) cells.push_back(bench::fmt(flop / r.per_level.at(isa)));
      cells.push_back(bench::fmt(flop / t[0]));
      cells.push_back(spread(flop / t[2], flop / t[1]));
      cells.push_back(bench::fmt((flop / rg_med) / (flop / t[0]), 2));
      table.add_row(cells);
    }

    std::printf("# ringgrad bench_gemm_cpu  dtype=float32  threads=%d  reps=%d  min_loop=%gs  commit=%s\n", opt.threads,
                opt.reps, min_time, RINGGRAD_BENCH_COMMIT);
    std::printf("%s\n", bench::machine_header().c_str());
    std::printf("%s\n", bench::cpu_gemm_header().c_str());
    if (pt.empty()) {
      std::printf("# pytorch=- (%s)\n", torch_why.c_str());
    } else {
      std::printf("# pytorch=%s torch.mm, threads=%s, %s\n", pt["torch_version"].c_str(), pt["threads"].c_str(),
                  pt["python"].c_str());
      bench::print_peer_blas(stdout, pt);
    }
    std::printf(
        "# GFLOP/s = 2 m n k / median time per call (loops of >= %g s, warm-up not timed); spread = slowest-fastest\n"
        "# repetition; ratio = ringgrad/pytorch GFLOP/s, > 1 is faster. Shape MxNxK:AB, A and B N as stored or T\n"
        "# transposed (C = op(A) op(B), m x n). packed <level>: ringgrad's packed kernel forced to that level\n#\n",
        min_time);
    table.print(stdout);

    if (!opt.json.empty()) {
      const std::vector<std::pair<std::string, std::string>> run = {
          {"dtype", "float32"},
          {"threads", std::to_string(opt.threads)},
          {"reps", std::to_string(opt.reps)},
          {"commit", RINGGRAD_BENCH_COMMIT},
          {"cpu", bench::cpu_model()},
          {"ringgrad_gemm", rg::kernels::cpu_gemm_build()},
          {"pytorch", pt.empty() ? "-" : pt["torch_version"]},
          {"pytorch_note", pt.empty() ? torch_why : bench::peer_blas_summary(pt)}};
      if (!bench::write_json(opt.json, "bench_gemm_cpu", run, {&table})) return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm_cpu: %s\n", e.what());
    return 1;
  }
}
