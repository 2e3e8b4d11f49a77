// bench/bench_elementwise.cpp: memory-bound CPU ops through the public API, next to PyTorch eager.
//
// Each op is called as a user calls it (Tensor ops, under NoGradGuard, a fresh output every call)
// on float32 inputs of 1 element to 64M elements, and judged in GB/s: the bytes an ideal kernel
// must move (inputs read once, output written once) over the median time per call. PyTorch does
// the same ops in the same run (bench/torch_elementwise.py), after ringgrad, so the two never share
// the cores; ratio = ringgrad / pytorch GB/s, >= 1 meets the goal. The ops and their bytes, n elements:
//
//   add       a + b, both [n]                                         12n B
//   relu      relu(x), [n]                                             8n B
//   sum       sum(x), all of [n] into one value                        4n B
//   sum_dim1  sum(x, {1}) of [n/1024, 1024]: one sum per row           4n B + 4 B a row
//   softmax   softmax(x, 1) of [n/1024, 1024]                          8n B
//   xent      cross_entropy(logits, labels), logits [n/10, 10], mean   4n B + 8 B a row (int64 labels)
//   copy      x.t().contiguous() of x [n/1024, 1024]: a transpose      8n B
//   tanh      tanh(x), [n] (only with --ops)                           8n B
//   gelu      gelu(x), exact (erf), [n] (only with --ops)              8n B
//
// (Below 1024 elements the matrices are [1, n]; cross_entropy has min(n, 10) classes; copy's matrix
// is [n/32, 32] below 32K elements, since a transposed [1, n] is contiguous and copies nothing.)
// The 1-element rows measure the cost of a call, so a second table gives their time per call in ns.
//
//   bench_elementwise [--quick] [--reps N] [--threads N] [--max-size N] [--ops LIST] [--sizes LIST]
//                     [--no-torch] [--python PATH] [--json FILE]
#include <ringgrad/ringgrad.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "tools/cli/flags.h"

namespace rg = ringgrad;

namespace {

const std::vector<std::string> kAllOps = {"add", "relu", "sum", "sum_dim1", "softmax", "xent", "copy"};
// tanh and gelu are measured only when asked for (--ops tanh,gelu): tanh is libm-bound, and its grain
// differs; gelu is exact GELU (erf), the MLP activation of a GPT.
const std::vector<std::string> kExtraOps = {"tanh", "gelu"};
const std::vector<int64_t> kSizes = {1, 1 << 10, 1 << 20, 1 << 22, 1 << 24, 1 << 26};

struct Options {
  bool quick = false;
  int reps = 0;  // 0: 7, or 3 with --quick
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int64_t max_size = int64_t{1} << 26;
  std::vector<std::string> ops = kAllOps;
  std::vector<int64_t> sizes = kSizes;
  bool torch = true;
  std::string python = "/usr/bin/python3";
  std::string json;
};

// "4096", "1K", "16M", "1G" (binary multiples) -> elements; 0 when the text is not one of those.
int64_t parse_count(const std::string& text) {
  if (text.empty()) return 0;
  int64_t scale = 1;
  std::string digits = text;
  const char last = text.back();
  if (last == 'K' || last == 'M' || last == 'G') {
    scale = last == 'K' ? int64_t{1} << 10 : last == 'M' ? int64_t{1} << 20 : int64_t{1} << 30;
    digits.pop_back();
  }
  if (digits.empty() || digits.size() > 12 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoll(digits) * scale;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

Options parse(int argc, char** argv) {
  Options opt;
  ringgrad::cli::FlagParser flags("bench_elementwise",
                                  "Elementwise ops, reductions, softmax, cross-entropy and a strided copy on the "
                                  "CPU, in GB/s, next to PyTorch eager.");
  flags.add_bool("--quick", &opt.quick, "fewer and shorter repetitions, sizes up to 4M elements");
  flags.add_int("--reps", &opt.reps, "timed repetitions per measurement, of which the median is reported", 1, 1000)
      .default_text("7, or 3 with --quick");
  flags.add_int("--threads", &opt.threads, "threads for ringgrad (set_num_threads) and torch.set_num_threads", 1, 4096)
      .default_text("all cores, " + std::to_string(opt.threads) + " here");
  flags
      .add_custom(
          "--max-size", "N", "largest size measured, in elements (suffixes K, M, G: 1024, 1024^2, 1024^3)",
          "an element count such as 65536, 1K or 16M (at least 1)",
          [&opt](const std::string& text) {
            opt.max_size = parse_count(text);
            return opt.max_size > 0;
          },
          [&opt] { return std::to_string(opt.max_size); })
      .default_text("64M, or 4M with --quick");
  flags.add_custom(
      "--ops", "LIST", "ops to measure, comma-separated",
      "a comma-separated list of " + join(kAllOps) + "," + join(kExtraOps),
      [&opt](const std::string& text) {
        std::vector<std::string> ops;
        std::stringstream in(text);
        for (std::string op; std::getline(in, op, ',');) {
          const bool known = std::find(kAllOps.begin(), kAllOps.end(), op) != kAllOps.end() ||
                             std::find(kExtraOps.begin(), kExtraOps.end(), op) != kExtraOps.end();
          if (!known) return false;
          ops.push_back(op);
        }
        if (ops.empty() || text.back() == ',') return false;
        opt.ops = ops;
        return true;
      },
      [&opt] { return join(opt.ops); });
  flags.add_list("--sizes", &opt.sizes, "sizes to measure, in elements (to find a grain, say)", int64_t{1},
                 int64_t{1} << 30);
  bool no_torch = false;
  flags.add_bool("--no-torch", &no_torch, "skip the PyTorch reference");
  flags.add_string("--python", &opt.python, "interpreter for bench/torch_elementwise.py").metavar("PATH");
  flags.add_string("--json", &opt.json, "also write the rows as JSON").metavar("FILE");
  const bool max_size_given = [&] {
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]).rfind("--max-size", 0) == 0) return true;
    return false;
  }();
  flags.parse(argc, argv);
  if (const std::string why = bench::unwritable_output({{"--json", opt.json}}); !why.empty())
    flags.exit_with_usage(why);
  opt.torch = !no_torch;
  if (opt.quick && !max_size_given) opt.max_size = int64_t{1} << 22;
  std::vector<int64_t> sizes;
  for (int64_t s : opt.sizes)
    if (s <= opt.max_size) sizes.push_back(s);
  opt.sizes = sizes;
  return opt;
}

// The shapes of an op at n elements: rows x cols of its matrix (cols = n for the flat ops).
struct Shape2 {
  int64_t rows, cols;
};

Shape2 shape_of(const std::string& op, int64_t n) {
  if (op == "xent") return n >= 10 ? Shape2{n / 10, 10} : Shape2{1, n};
  if (op == "sum_dim1" || op == "softmax") return n >= 1024 ? Shape2{n / 1024, 1024} : Shape2{1, n};
  if (op == "copy") {  // a [1, c] matrix transposed is still contiguous: below 32K, 32 columns
    const int64_t cols = n >= 32768 ? 1024 : 32;
    return n >= cols ? Shape2{n / cols, cols} : Shape2{1, n};
  }
  return {1, n};
}

// Bytes an ideal kernel moves for `op` on its shape (see the table at the top).
double bytes_of(const std::string& op, Shape2 s) {
  const double n = static_cast<double>(s.rows * s.cols), rows = static_cast<double>(s.rows);
  if (op == "add") return 12 * n;
  if (op == "relu" || op == "softmax" || op == "copy" || op == "tanh" || op == "gelu") return 8 * n;
  if (op == "sum") return 4 * n;
  if (op == "sum_dim1") return 4 * n + 4 * rows;
  return 4 * n + 8 * rows;  // xent
}

void keep(const rg::Tensor& t) { bench::do_not_optimize(t.impl()); }

// ns per call, one value per repetition.
std::vector<double> time_ringgrad(const std::string& op, Shape2 s, int reps, double min_time) {
  rg::NoGradGuard no_grad;
  const rg::Shape shape = op == "add" || op == "relu" || op == "sum" || op == "tanh" || op == "gelu"
                              ? rg::Shape{s.rows * s.cols}
                              : rg::Shape{s.rows, s.cols};
  const rg::Tensor x = rg::randn(shape, rg::DType::f32, 1);
  if (op == "add") {
    const rg::Tensor y = rg::randn(shape, rg::DType::f32, 2);
    return bench::time_per_call([&] { keep(x + y); }, reps, min_time);
  }
  if (op == "relu") return bench::time_per_call([&] { keep(rg::relu(x)); }, reps, min_time);
  if (op == "tanh") return bench::time_per_call([&] { keep(rg::tanh(x)); }, reps, min_time);
  if (op == "gelu") return bench::time_per_call([&] { keep(rg::gelu(x)); }, reps, min_time);
  if (op == "sum") return bench::time_per_call([&] { keep(rg::sum(x)); }, reps, min_time);
  if (op == "sum_dim1") return bench::time_per_call([&] { keep(rg::sum(x, {1})); }, reps, min_time);
  if (op == "softmax") return bench::time_per_call([&] { keep(rg::softmax(x, 1)); }, reps, min_time);
  if (op == "copy") {
    const rg::Tensor xt = x.t();
    return bench::time_per_call([&] { keep(xt.contiguous()); }, reps, min_time);
  }
  std::vector<int64_t> labels(static_cast<size_t>(s.rows));
  for (int64_t r = 0; r < s.rows; ++r) labels[static_cast<size_t>(r)] = (r * 7 + 3) % s.cols;
  const rg::Tensor y = rg::from_vector(labels);
  return bench::time_per_call([&] { keep(rg::cross_entropy(x, y)); }, reps, min_time);
}

// PyTorch's numbers ("key value" lines), or an empty map and `why` explaining their absence.
std::map<std::string, std::string> run_torch(const Options& opt, int reps, double min_time, std::string& why) {
  std::string size_list;
  for (int64_t s : opt.sizes) size_list += (size_list.empty() ? "" : ",") + std::to_string(s);
  return bench::run_key_value_script(opt.python, std::string(RINGGRAD_BENCH_DIR) + "/torch_elementwise.py",
                                     "--threads " + std::to_string(opt.threads) + " --reps " + std::to_string(reps) +
                                         " --min-time " + std::to_string(min_time) + " --sizes " + size_list +
                                         " --ops " + join(opt.ops),
                                     why);
}

// "median min max" ns of one PyTorch measurement; NaNs when absent.
std::vector<double> torch_ns(const std::map<std::string, std::string>& kv, const std::string& key) {
  const auto it = kv.find(key);
  if (it == kv.end()) return {NAN, NAN, NAN};
  std::istringstream in(it->second);
  std::vector<double> v(3, NAN);
  for (double& x : v) in >> x;
  return v;
}

std::string spread(double lo, double hi, int precision) {
  return bench::fmt(lo, precision) + "-" + bench::fmt(hi, precision);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const int reps = opt.reps ? opt.reps : (opt.quick ? 3 : 7);
  const double min_time = opt.quick ? 0.02 : 0.05;

  try {
    rg::set_num_threads(opt.threads);  // for the kernels started from this thread, which makes every call

    // --- ringgrad ---------------------------------------------------------------------------------
    struct Row {
      std::string op;
      int64_t n;
      Shape2 shape;
      double ns, ns_min, ns_max;
    };
    std::vector<Row> rows;
    for (const std::string& op : opt.ops) {
      for (int64_t n : opt.sizes) {
        const Shape2 s = shape_of(op, n);
        const std::vector<double> ns = time_ringgrad(op, s, reps, min_time);
        rows.push_back({op, s.rows * s.cols, s, bench::median(ns), *std::min_element(ns.begin(), ns.end()),
                        *std::max_element(ns.begin(), ns.end())});
      }
    }

    // --- PyTorch, after ringgrad so the two never share the cores -----------------------------------
    std::string torch_why = "skipped (--no-torch)";
    std::map<std::string, std::string> pt;
    if (opt.torch) pt = run_torch(opt, reps, min_time, torch_why);

    // --- the report ---------------------------------------------------------------------------------
    bench::Table table("elementwise", {{"op", "", 8, true},
                                       {"elements", "", 9},
                                       {"ringgrad", "GB/s", 8},
                                       {"rg spread", "GB/s", 11},
                                       {"pytorch", "GB/s", 8},
                                       {"pt spread", "GB/s", 11},
                                       {"ratio", "rg/pt", 6},
                                       {"rg time", "us", 11},
                                       {"pt time", "us", 11}});
    bench::Table tiny("one_element", {{"op", "", 8, true},
                                      {"ringgrad", "ns", 9},
                                      {"rg spread", "ns", 13},
                                      {"pytorch", "ns", 9},
                                      {"pt spread", "ns", 13},
                                      {"ratio", "rg/pt", 6}});
    bool any_tiny = false;
    for (const Row& r : rows) {
      const double bytes = bytes_of(r.op, r.shape);
      const std::vector<double> t = torch_ns(pt, r.op + "_" + std::to_string(r.n) + "_ns");
      const double gbs = bytes / r.ns, pt_gbs = bytes / t[0];
      // The spread of GB/s: the fastest repetition gives the highest rate.
      table.add_row({r.op, std::to_string(r.n), bench::fmt(gbs, 2), spread(bytes / r.ns_max, bytes / r.ns_min, 2),
                     bench::fmt(pt_gbs, 2), spread(bytes / t[2], bytes / t[1], 2), bench::fmt(gbs / pt_gbs, 2),
                     bench::fmt(r.ns * 1e-3, 3), bench::fmt(t[0] * 1e-3, 3)});
      if (r.n == 1) {
        any_tiny = true;
        tiny.add_row({r.op, bench::fmt(r.ns), spread(r.ns_min, r.ns_max, 0), bench::fmt(t[0]), spread(t[1], t[2], 0),
                      bench::fmt(t[0] / r.ns, 2)});
      }
    }

    const std::string torch_desc =
        pt.empty() ? "pytorch=- (" + torch_why + ")"
                   : "pytorch=" + pt["torch_version"] + " eager cpu, threads=" + pt["threads"] + ", " + pt["python"];
    std::printf(
        "# ringgrad bench_elementwise  dtype=float32  threads=%d  cpu_devices=%d  reps=%d  min_loop=%gs  "
        "commit=%s%s\n",
        opt.threads, rg::cpu_device_count(), reps, min_time, RINGGRAD_BENCH_COMMIT, opt.quick ? "  quick" : "");
    std::printf("%s\n", bench::machine_header().c_str());
    std::printf("# %s\n", torch_desc.c_str());
    for (const auto& [key, value] : pt)
      if (key.rfind("blas", 0) == 0) std::printf("# pytorch %s: %s\n", key.c_str(), value.c_str());
    std::printf("# times: median over reps of the time per call in a loop of >= %g s; warm-up not timed\n", min_time);
    std::printf(
        "# GB/s = the bytes an ideal kernel moves (see bench_elementwise.cpp) / median time; spread = slowest-fastest\n"
        "# repetition; ratio = ringgrad/pytorch GB/s, >= 1 meets the goal; every call allocates its output\n#\n");
    table.print(stdout);
    if (any_tiny) {
      std::printf(
          "#\n# one element: time per call, the cost of dispatch; ratio = pytorch/ringgrad time, > 1 is faster\n#\n");
      tiny.print(stdout);
    }

    if (!opt.json.empty()) {
      std::vector<std::pair<std::string, std::string>> run = {{"dtype", "float32"},
                                                              {"threads", std::to_string(opt.threads)},
                                                              {"cpu_devices", std::to_string(rg::cpu_device_count())},
                                                              {"reps", std::to_string(reps)},
                                                              {"min_loop_s", bench::fmt(min_time, 3)},
                                                              {"commit", RINGGRAD_BENCH_COMMIT},
                                                              {"pytorch", pt.empty() ? "-" : pt["torch_version"]},
                                                              {"pytorch_note", pt.empty() ? torch_why : pt["blas"]}};
      if (!bench::write_json(opt.json, "bench_elementwise", run, {&table, &tiny})) {
        std::fprintf(stderr, "bench_elementwise: cannot write %s\n", opt.json.c_str());
        return 1;
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_elementwise: %s\n", e.what());
    return 1;
  }
}
