// bench/dp_vs_ddp/main.cpp: how do DataParallel and DistributedDataParallel compare, and why?
//
//   ./build/bench/dp_vs_ddp                                  # 2 logical CPU devices, all modes
//   ./build/bench/dp_vs_ddp --json r.json --csv r.csv --trace traces --model
//   ./build/bench/dp_vs_ddp --device cuda --devices 8 --layers 1024,4096,4096,1024 --batch 2048
//   /usr/bin/python3 bench/plot.py r.json --trace traces/ddp-bucketed-25MB.trace.json
//
// One model (an MLP), one global batch, the same steps, in these modes on N devices:
//   single         one device, the whole batch: the baseline (speed-up 1, the reference parameters)
//   dp             DataParallel: one process scatters the batch, replicates the model, runs the
//                  replicas in parallel, gathers the outputs, reduces the gradients onto device 0
//   ddp-naive      DDP, one all-reduce per parameter after backward
//   ddp-flat       DDP, one all-reduce of all gradients after backward
//   ddp-overlap    DDP, one all-reduce per parameter, launched from its gradient hook
//   ddp-bucketed   DDP as PyTorch does it: buckets (--caps 1,5,25,100 MB), launched as they fill
//   ddp-no_sync    DDP steps without communication: the floor the others are judged by
// The DDP modes run in N processes this program starts (like torch.multiprocessing.spawn).
// workload.h says what is shared and how the cores are split; report.cpp what each column means.
#include <ringgrad/ringgrad.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "../bench_launch.h"
#include "../bench_util.h"
#include "modes.h"
#include "peak_memory.h"
#include "report.h"

using namespace ringgrad;

namespace bench {
namespace {

const char* kUsage = R"(usage: dp_vs_ddp [options]
  --device cpu|cuda        logical CPU devices (default) or GPUs
  --devices N              devices for dp and processes for ddp (default 2)
  --layers 784,1024,1024,10  the MLP (or --depth D --width W: 784, D hidden layers of W, 10)
  --batch B                global batch (default 256; must divide by N)
  --steps S --warmup W     timed and untimed steps per mode (default 50, 5)
  --lr X                   SGD learning rate (momentum 0.9; default 0.01)
  --modes a,b,...          of single,dp,ddp-naive,ddp-flat,ddp-overlap,ddp-bucketed,ddp-no_sync
                           (default all)
  --caps 1,5,25,100        bucket caps (MB) ddp-bucketed sweeps
  --data synthetic|fashion-mnist
  --tolerance X            max |parameter - single's| counted as correct (default 1e-4)
  --json FILE --csv FILE   write the results
  --trace DIR              a Chrome/Perfetto trace per mode: DIR/<mode>.trace.json
  --model                  the alpha-beta scaling model: calibrate, validate, extrapolate to 1024
  --micro                  also run bench_micro (Google Benchmark) into the JSON
  --no-torch               skip PyTorch's rows (bench/compare/torch_dp_vs_ddp.py)
  --python PATH            the Python with torch for those rows (default /usr/bin/python3)
)";

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The value of `flag` as a number, or an Error naming both.
template <typename T>
T number(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    const double v = std::stod(value, &used);
    if (used == value.size() && (std::is_floating_point<T>::value || v == static_cast<double>(static_cast<T>(v))))
      return static_cast<T>(v);
  } catch (const std::exception&) {
  }
  throw Error("dp_vs_ddp: " + flag + " expected " + (std::is_floating_point<T>::value ? "a number" : "an integer") +
              ", got '" + value + "'");
}

Options parse(int argc, char** argv) {
  Options o;
  int depth = -1, width = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf("%s", kUsage);
      std::exit(0);
    }
    if (flag == "--model") { o.scaling_model = true; continue; }
    if (flag == "--micro") { o.micro = true; continue; }
    if (flag == "--no-torch") { o.torch = false; continue; }
    RINGGRAD_CHECK(i + 1 < argc, "dp_vs_ddp: ", flag, " needs a value (see --help)");
    const std::string value = argv[++i];
    if (flag == "--device") o.device = value;
    else if (flag == "--python") o.python = value;
    else if (flag == "--devices") o.devices = number<int>(flag, value);
    else if (flag == "--layers") {
      o.layers.clear();
      for (const std::string& s : split(value)) o.layers.push_back(number<int64_t>(flag, s));
    } else if (flag == "--depth") depth = number<int>(flag, value);
    else if (flag == "--width") width = number<int>(flag, value);
    else if (flag == "--batch") o.batch = number<int64_t>(flag, value);
    else if (flag == "--steps") o.steps = number<int>(flag, value);
    else if (flag == "--warmup") o.warmup = number<int>(flag, value);
    else if (flag == "--lr") o.lr = number<double>(flag, value);
    else if (flag == "--modes") o.modes = split(value);
    else if (flag == "--caps") {
      o.caps.clear();
      for (const std::string& s : split(value)) o.caps.push_back(number<double>(flag, s));
    } else if (flag == "--data") o.data = value;
    else if (flag == "--tolerance") o.tolerance = number<double>(flag, value);
    else if (flag == "--json") o.json = value;
    else if (flag == "--csv") o.csv = value;
    else if (flag == "--trace") o.trace_dir = value;
    else throw Error("dp_vs_ddp: unknown flag " + flag + " (see --help)");
  }
  if (depth > 0 || width > 0) {
    RINGGRAD_CHECK(depth > 0 && width > 0, "dp_vs_ddp: --depth and --width go together, got depth ", depth, " width ", width);
    o.layers = {784};
    for (int d = 0; d < depth; ++d) o.layers.push_back(width);
    o.layers.push_back(10);
  }
  RINGGRAD_CHECK(o.device == "cpu" || o.device == "cuda", "dp_vs_ddp: --device expected cpu or cuda, got ", o.device);
  RINGGRAD_CHECK(o.devices >= 1, "dp_vs_ddp: --devices expected >= 1, got ", o.devices);
  RINGGRAD_CHECK(o.layers.size() >= 2, "dp_vs_ddp: --layers expected at least two sizes, got ", o.layers.size());
  RINGGRAD_CHECK(o.batch >= o.devices, "dp_vs_ddp: --batch must give every device at least one sample, got ", o.batch,
                 " for ", o.devices, " devices");
  for (int64_t size : o.layers) RINGGRAD_CHECK(size >= 1, "dp_vs_ddp: --layers expected sizes >= 1, got ", size);
  for (double cap : o.caps) RINGGRAD_CHECK(cap >= 0, "dp_vs_ddp: --caps expected sizes >= 0 MB, got ", cap);
  RINGGRAD_CHECK(o.batch % o.devices == 0, "dp_vs_ddp: --batch must divide by --devices (every rank gets batch / N), got ",
                 o.batch, " and ", o.devices);
  RINGGRAD_CHECK(o.steps >= 1 && o.warmup >= 0, "dp_vs_ddp: expected --steps >= 1 and --warmup >= 0, got ", o.steps,
                 " and ", o.warmup);
  for (const std::string& m : o.modes)
    RINGGRAD_CHECK(m == "single" || m == "dp" || m == "ddp-naive" || m == "ddp-flat" || m == "ddp-overlap" ||
                       m == "ddp-bucketed" || m == "ddp-no_sync",
                   "dp_vs_ddp: unknown mode ", m, " (see --help)");
  o.trace_steps = std::min(o.trace_steps, o.steps);
  return o;
}

bool wants(const Options& o, const std::string& mode) {
  return std::find(o.modes.begin(), o.modes.end(), mode) != o.modes.end();
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

std::string program_dir() { return std::filesystem::read_symlink("/proc/self/exe").parent_path().string(); }

void write_trace(Run& run, const std::string& id, const Trace& trace) {
  std::filesystem::create_directories(run.options.trace_dir);
  const std::string path = run.options.trace_dir + "/" + id + ".trace.json";
  std::ofstream(path) << trace.document().dump() << '\n';
  run.traces.push_back(path);
}

// Runs the DDP variants in N processes and collects what rank 0 wrote.
void run_ddp(Run& run, char** argv, const std::vector<double>& single_params) {
  const Options& o = run.options;
  const std::string file = "/tmp/ringgrad_dp_vs_ddp_" + std::to_string(::getpid()) + ".txt";
  std::remove(file.c_str());
  std::printf("# ddp: %d processes ...\n", o.devices);
  std::fflush(stdout);
  const int status = launch_ranks(o.devices, argv, file);
  RINGGRAD_CHECK(status == 0, "dp_vs_ddp: a DDP rank failed (exit status ", status, "); its error is above");
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("allreduce")) run.allreduce = j["allreduce"];
    if (!j.contains("result")) continue;
    ModeResult r = from_wire(j["result"]);
    const std::string params_file = result_side_file(file, "params." + r.id);
    std::vector<double> params(single_params.size());
    std::ifstream p(params_file, std::ios::binary);
    p.read(reinterpret_cast<char*>(params.data()), static_cast<std::streamsize>(params.size() * sizeof(double)));
    r.max_abs_diff = p.gcount() == static_cast<std::streamsize>(params.size() * sizeof(double))
                         ? max_abs_diff(params, single_params) : INFINITY;
    std::remove(params_file.c_str());
    if (!o.trace_dir.empty()) {
      Trace merged;
      for (int rank = 0; rank < o.devices; ++rank) {
        const std::string events_file = result_side_file(file, "trace." + r.id + "." + std::to_string(rank));
        std::ifstream events(events_file);
        if (events) merged.append(nlohmann::json::parse(events));
        std::remove(events_file.c_str());
      }
      write_trace(run, r.id, merged);
    }
    run.modes.push_back(std::move(r));
  }
  std::remove(file.c_str());
}

// PyTorch's rows, from bench/compare/torch_dp_vs_ddp.py, when --python (/usr/bin/python3) has torch.
void run_torch(Run& run) {
  const Options& o = run.options;
  std::string layers, caps;
  for (int64_t l : o.layers) layers += (layers.empty() ? "" : ",") + std::to_string(l);
  const ModeResult* ref = nullptr;
  for (const ModeResult& r : run.modes) ref = r.mode == "ddp-bucketed" && (!ref || r.cap_mb == 25) ? &r : ref;
  caps = fmt(ref ? ref->cap_mb : 25.0, 6);
  const std::string cmd = "timeout 900 " + shell_quote(o.python) + " " +
                          shell_quote(std::string(RINGGRAD_BENCH_DIR) + "/compare/torch_dp_vs_ddp.py") + " --layers " +
                          layers + " --global-batch " + std::to_string(o.batch) + " --devices " + std::to_string(o.devices) +
                          " --steps " + std::to_string(o.steps) + " --warmup " + std::to_string(o.warmup) + " --lr " +
                          fmt(o.lr, 17) + " --caps " + caps + " --device " + o.device + " --threads-per-device " +
                          std::to_string(o.threads_per_device()) + " 2>/dev/null";
  std::printf("# pytorch: %s\n", cmd.c_str());
  std::fflush(stdout);
  std::string text;
  if (run_command(cmd, text) != 0) {
    run.notes.push_back("PyTorch rows: not measured (needs " + o.python +
                        " with torch: Debian's python3-torch, or --python)");
    return;
  }
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      run.notes.push_back("PyTorch: " + line.substr(line.find_first_not_of("# ")));
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(line);
    ModeResult r;
    r.mode = j.at("mode");
    r.source = "pytorch";
    r.devices = j.value("devices", 1);
    r.cap_mb = j.contains("bucket_cap_mb") && j["bucket_cap_mb"].is_number() ? j["bucket_cap_mb"].get<double>() : NAN;
    r.id = mode_id(r.mode, r.cap_mb);
    r.step_ms = j.at("step_ms").get<std::vector<double>>();
    if (j.contains("torch")) r.note = "torch " + j["torch"].get<std::string>();
    run.modes.push_back(std::move(r));
  }
}

void run_micro(Run& run) {
  const std::string exe = program_dir() + "/bench_micro";
  if (::access(exe.c_str(), X_OK) != 0) {
    run.notes.push_back("micro: bench_micro not built (needs Debian's libbenchmark-dev)");
    return;
  }
  std::printf("# micro: %s\n", exe.c_str());
  std::fflush(stdout);
  std::string text;
  if (run_command(shell_quote(exe) + " --benchmark_format=json --benchmark_min_time=0.05 2>/dev/null", text) == 0)
    run.micro = nlohmann::json::parse(text, nullptr, false);
  if (run.micro.is_discarded() || run.micro.is_null()) {
    run.micro = nullptr;
    run.notes.push_back("micro: bench_micro failed");
  }
}

int run_parent(const Options& o, char** argv) {
  CountingHostAllocator::install();  // before the first tensor, so every CPU byte is counted
  if (o.device == "cpu") {
    set_cpu_device_count(o.devices);
    set_num_threads(o.threads_per_device());  // `single`'s forward runs on this thread
  } else {
    RINGGRAD_CHECK(cuda_device_count() > 0, "dp_vs_ddp: --device cuda, but this process sees no GPU");
  }
  Run run;
  run.options = o;
  const Data data = make_data(o);
  for (const Tensor& p : make_model(o, Device::cpu())->parameters()) run.param_bytes.push_back(p.numel() * p.element_size());

  std::optional<Trace> trace;
  auto start_trace = [&]() -> Trace* { return o.trace_dir.empty() ? nullptr : &trace.emplace(); };
  std::vector<double> single_params, params;
  std::printf("# single ...\n");
  std::fflush(stdout);
  run.modes.push_back(run_single(o, data, single_params, start_trace()));
  if (trace) write_trace(run, "single", *trace);
  if (wants(o, "dp")) {
    std::printf("# dp ...\n");
    std::fflush(stdout);
    ModeResult r = run_dp(o, data, params, start_trace());
    r.max_abs_diff = max_abs_diff(params, single_params);
    if (!r.note.empty()) run.notes.push_back("dp: " + r.note);
    run.modes.push_back(std::move(r));
    if (trace) write_trace(run, "dp", *trace);
  }
  // The DDP ranks are separate processes on the same devices: give back what this one cached.
  if (o.device == "cuda") cuda_empty_cache();
  if (!ddp_variants(o).empty()) run_ddp(run, argv, single_params);
  if (o.scaling_model && o.devices >= 2) {
    int64_t bytes = 0;
    for (int64_t b : run.param_bytes) bytes += b;
    run.copy_link = measure_copy_link(o, bytes);
  }
  if (o.torch) run_torch(run);
  if (o.micro) run_micro(run);
  std::printf("#\n");
  return report(run);
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  try {
    const bench::Options o = bench::parse(argc, argv);
    if (bench::is_rank()) return bench::run_ddp_rank(o);
    return bench::run_parent(o, argv);
  } catch (const std::exception& e) {
    const std::string what = e.what();  // the benchmark's own errors already start with its name
    std::fprintf(stderr, "%s%s\n", what.rfind("dp_vs_ddp:", 0) == 0 ? "" : "dp_vs_ddp: ", what.c_str());
    return 2;
  }
}
