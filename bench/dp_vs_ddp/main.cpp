// bench/dp_vs_ddp/main.cpp: how do DataParallel and DistributedDataParallel compare, and why?
//
//   ./build/bench/dp_vs_ddp                                  # 2 logical CPU devices, all modes
//   ./build/bench/dp_vs_ddp --json r.json --csv r.csv --trace traces --scaling-model
//   ./build/bench/dp_vs_ddp --model gpt --caps 0.25,1,4,25   # the bucket-size trade-off
//   ./build/bench/dp_vs_ddp --device cuda --devices 8 --layers 1024,4096,4096,1024 --batch 2048
//   /usr/bin/python3 bench/plot.py r.json --trace traces/ddp-bucketed-25MB.trace.json
//
// One model (an MLP, or with --model gpt a GPT-2-style decoder), one global batch, the same steps, in
// these modes on N devices:
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

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "../bench_launch.h"
#include "../bench_util.h"
#include "tools/cli/flags.h"
#include "modes.h"
#include "peak_memory.h"
#include "report.h"

using namespace ringgrad;

namespace bench {
namespace {

const std::vector<std::string> kAllModes = {"single",      "dp",           "ddp-naive",  "ddp-flat",
                                            "ddp-overlap", "ddp-bucketed", "ddp-no_sync"};

Options parse(int argc, char** argv) {
  Options o;
  int depth = 0, width = 0;
  ringgrad::cli::FlagParser flags("dp_vs_ddp",
                                  "DataParallel against DistributedDataParallel on one model (an MLP or a GPT) and one "
                                  "global batch, with breakdowns, traces and a scaling model.");
  flags.add_choice("--model", &o.model, {"mlp", "gpt"},
                   "mlp: nn::MLP (--layers); gpt: examples/gpt's decoder over bytes (--gpt-layers, --gpt-width, "
                   "--gpt-heads, --context), whose many parameters of many sizes make bucketing matter");
  flags.add_choice("--device", &o.device, {"cpu", "cuda"}, "logical CPU devices or GPUs");
  flags.add_int("--devices", &o.devices, "devices for dp, and processes for ddp", 1, 1024);
  flags.add_choice("--backend", &o.backend, {"auto", "ring", "gloo", "nccl"},
                   "the DDP ranks' process group; auto: nccl with a GPU per rank in a build with NCCL, else ring");
  flags.add_choice("--comm-hook", &o.comm_hook, {"none", "bf16", "fp16"},
                   "what each DDP bucket is sent as: none, float32 as it is; bf16 or fp16, bfloat16 or float16 (half "
                   "the bytes)");
  flags.add_int("--hosts", &o.hosts,
                "emulated hosts the DDP ranks are spread over (network namespaces, needs root); 1: this machine", 1,
                32);
  flags.add_double("--link-gbit", &o.link_gbit, "with --hosts: each host's link speed in Gbit/s; 0: unshaped", 0.0,
                   1e4);
  flags.add_list("--layers", &o.layers, "the MLP's layer sizes, input first", 1, 1 << 20);
  flags.add_int("--depth", &depth, "instead of --layers: 784, D hidden layers of --width, 10", 1, 1000)
      .default_text("none");
  flags.add_int("--width", &width, "the hidden layers' size with --depth", 1, 1 << 20).default_text("none");
  flags.add_int("--gpt-layers", &o.gpt.layers, "with --model gpt: transformer blocks", 1, 1000);
  flags.add_int("--gpt-width", &o.gpt.width, "with --model gpt: the model's width", 1, 1 << 16);
  flags.add_int("--gpt-heads", &o.gpt.heads, "with --model gpt: attention heads; must divide --gpt-width", 1, 1 << 16);
  flags.add_int("--context", &o.gpt.context, "with --model gpt: tokens per sequence", 1, 1 << 16);
  flags.add_int("--batch", &o.batch, "global batch (gpt: sequences); must divide by --devices", 1, 1 << 24)
      .default_text("256 (mlp), 16 (gpt, rounded up to a multiple of --devices)");
  flags.add_int("--steps", &o.steps, "timed steps per mode", 1, 1000000);
  flags.add_int("--warmup", &o.warmup, "untimed steps before them", 0, 1000000);
  flags.add_double("--lr", &o.lr, "SGD learning rate, with momentum 0.9", 0.0, 1e3);
  std::string all_modes;
  for (const std::string& m : kAllModes) all_modes += (all_modes.empty() ? "" : ",") + m;
  flags.add_custom(
      "--modes", "a,b,...", "the modes to run, of " + all_modes, "a comma-separated list of " + all_modes,
      [&o](const std::string& text) {
        std::vector<std::string> modes;
        std::stringstream in(text);
        for (std::string item; std::getline(in, item, ',');) {
          if (std::find(kAllModes.begin(), kAllModes.end(), item) == kAllModes.end()) return false;
          modes.push_back(item);
        }
        if (modes.empty()) return false;
        o.modes = modes;
        return true;
      },
      [&o] {
        std::string list;
        for (const std::string& m : o.modes) list += (list.empty() ? "" : ",") + m;
        return list;
      });
  flags.add_list("--caps", &o.caps, "bucket caps (MB) that ddp-bucketed sweeps", 0.0, 1e6)
      .default_text("1,5,25,100 (mlp), 0.25,1,4,25 (gpt)");
  flags.add_double("--first-cap", &o.first_cap, "ddp-bucketed's first bucket cap (MB)", 0.0, 1e6)
      .default_text("1 (PyTorch's), or the cap when smaller");
  flags.add_choice("--data", &o.data, {"synthetic", "fashion-mnist"}, "random inputs, or Fashion-MNIST's images");
  flags.add_double("--tolerance", &o.tolerance, "largest |parameter - single's| counted as correct", 0.0, 1e6);
  flags.add_string("--json", &o.json, "write the results as JSON").metavar("FILE");
  flags.add_string("--csv", &o.csv, "write the results as CSV").metavar("FILE");
  flags.add_string("--trace", &o.trace_dir, "a Chrome/Perfetto trace per mode: DIR/<mode>.trace.json").metavar("DIR");
  flags.add_bool("--scaling-model", &o.scaling_model,
                 "the alpha-beta scaling model: calibrate, validate, extrapolate to 1024");
  flags.add_bool("--micro", &o.micro, "also run bench_micro, the Google Benchmark programs, into the JSON");
  bool no_torch = false;
  flags.add_bool("--no-torch", &no_torch, "skip PyTorch's rows, from bench/compare/torch_dp_vs_ddp.py");
  flags.add_string("--python", &o.python, "the Python with torch for those rows").metavar("PATH");
  flags.parse(argc, argv);
  // The results' folders are made when they are written (report.cpp): make them now, then check.
  for (const std::string* output : {&o.json, &o.csv}) {
    std::error_code ignored;
    if (!output->empty()) std::filesystem::create_directories(std::filesystem::path(*output).parent_path(), ignored);
  }
  if (const std::string why = bench::unwritable_output({{"--json", o.json}, {"--csv", o.csv}}); !why.empty())
    flags.exit_with_usage(why);
  o.torch = !no_torch;

  if (o.model == "gpt") {
    for (const char* flag : {"--layers", "--depth", "--width"})
      if (flags.was_set(flag))
        flags.exit_with_usage(std::string(flag) + " sizes the MLP, got it with --model gpt; use --gpt-layers, " +
                              "--gpt-width, --gpt-heads and --context");
    if (o.data != "synthetic")
      flags.exit_with_usage("--data " + o.data + " is images for the MLP, got it with --model gpt (random bytes)");
    if (o.gpt.width % o.gpt.heads != 0)
      flags.exit_with_usage("--gpt-heads must divide --gpt-width, got --gpt-width " + std::to_string(o.gpt.width) +
                            " and --gpt-heads " + std::to_string(o.gpt.heads));
    if (!flags.was_set("--batch")) o.batch = (16 + o.devices - 1) / o.devices * o.devices;
    if (!flags.was_set("--caps")) o.caps = {0.25, 1, 4, 25};
  } else {
    for (const char* flag : {"--gpt-layers", "--gpt-width", "--gpt-heads", "--context"})
      if (flags.was_set(flag)) flags.exit_with_usage(std::string(flag) + " sizes the GPT: it needs --model gpt");
  }
  if (flags.was_set("--depth") != flags.was_set("--width"))
    flags.exit_with_usage("--depth and --width go together, got only " +
                          std::string(flags.was_set("--depth") ? "--depth" : "--width"));
  if (flags.was_set("--depth")) {
    if (flags.was_set("--layers")) flags.exit_with_usage("--layers and --depth/--width are alternatives, got both");
    o.layers = {784};
    for (int d = 0; d < depth; ++d) o.layers.push_back(width);
    o.layers.push_back(10);
  }
  if (o.layers.size() < 2)
    flags.exit_with_usage("--layers expects at least two sizes (input and output), got " +
                          std::to_string(o.layers.size()));
  if (o.batch % o.devices != 0)
    flags.exit_with_usage("--batch must divide by --devices (every rank gets batch / N), got --batch " +
                          std::to_string(o.batch) + " and --devices " + std::to_string(o.devices));
  if (o.backend == "gloo" && !ringgrad::parallel::gloo_available())
    flags.exit_with_usage("--backend gloo needs a build with Gloo (apt-get install libgloo-dev, then configure again)");
  if (o.backend == "gloo" && o.device == "cuda")
    flags.exit_with_usage("--backend gloo takes CPU tensors, got --device cuda; use --backend nccl or ring");
  if (o.backend == "nccl" && !ringgrad::parallel::nccl_available())
    flags.exit_with_usage("--backend nccl needs a build with CUDA and NCCL; use --backend ring or gloo");
  if (o.backend == "nccl" && o.device != "cuda")
    flags.exit_with_usage("--backend nccl takes CUDA tensors, got --device " + o.device + "; use --device cuda");
  if (o.hosts > 1 && o.devices % o.hosts != 0)
    flags.exit_with_usage("--devices must divide by --hosts (every host runs N / H ranks), got --devices " +
                          std::to_string(o.devices) + " and --hosts " + std::to_string(o.hosts));
  if (o.hosts > 1 && o.device != "cpu")
    flags.exit_with_usage("--hosts emulates hosts for CPU ranks, got --device " + o.device);
  if (flags.was_set("--link-gbit") && o.hosts == 1)
    flags.exit_with_usage("--link-gbit shapes the links between emulated hosts: it needs --hosts 2 or more");
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
  if (bench::write_output(path, trace.document().dump() + "\n")) run.traces.push_back(path);
}

// Runs the DDP variants in N processes and collects what rank 0 wrote.
void run_ddp(Run& run, int argc, char** argv, const std::vector<double>& single_params) {
  const Options& o = run.options;
  const std::string file = "/tmp/ringgrad_dp_vs_ddp_" + std::to_string(::getpid()) + ".txt";
  std::remove(file.c_str());
  const std::vector<std::string> env = {"BENCH_RESULT_FILE=" + file};
  int status = 0;
  if (o.hosts > 1) {
    std::printf("# ddp: %d processes on emulated hosts (%s) ...\n", o.devices, o.hosts_text().c_str());
    std::fflush(stdout);
    status = launch_on_hosts("dp_vs_ddp", o.hosts, o.devices, o.link_gbit, this_program(argc, argv), env);
  } else {
    std::printf("# ddp: %d processes ...\n", o.devices);
    std::fflush(stdout);
    status = launch_ranks("dp_vs_ddp", o.devices, this_program(argc, argv), env);
  }
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
                         ? max_abs_diff(params, single_params)
                         : INFINITY;
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
  const std::string model = o.model == "gpt" ? " --model gpt --gpt " + std::to_string(o.gpt.layers) + "," +
                                                   std::to_string(o.gpt.width) + "," + std::to_string(o.gpt.heads) +
                                                   "," + std::to_string(o.gpt.context)
                                             : " --layers " + layers;
  const ModeResult* ref = nullptr;
  for (const ModeResult& r : run.modes) ref = r.mode == "ddp-bucketed" && (!ref || r.cap_mb == 25) ? &r : ref;
  caps = fmt(ref ? ref->cap_mb : 25.0, 6);
  const std::string cmd = "timeout 900 " + shell_quote(o.python) + " " +
                          shell_quote(std::string(RINGGRAD_BENCH_DIR) + "/compare/torch_dp_vs_ddp.py") + model +
                          " --global-batch " + std::to_string(o.batch) + " --devices " + std::to_string(o.devices) +
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

int run_parent(const Options& o, int argc, char** argv) {
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
  run.param_bytes = parameter_bytes(o);

  std::optional<Trace> trace;
  auto start_trace = [&]() -> Trace* { return o.trace_dir.empty() ? nullptr : &trace.emplace(); };
  std::vector<double> single_params, params;
  std::printf("# single ...\n");
  std::fflush(stdout);
  if (o.comm_hook != "none")
    run.notes.push_back("every DDP mode sends its buckets as " + o.comm_hook + " (--comm-hook " + o.comm_hook +
                        "); ddp-no_sync sends nothing");
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
  if (!ddp_variants(o).empty()) run_ddp(run, argc, argv, single_params);
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
    // Its DDP ranks are processes it starts itself, with BENCH_RESULT_FILE, between the modes it runs
    // alone: it cannot be one rank among others of someone else's job.
    if (std::getenv("BENCH_RESULT_FILE") != nullptr) return bench::run_ddp_rank(o);
    if (const std::optional<bench::JobEnvironment> job = bench::job_from_environment()) {
      const std::string whose =
          job->launcher.empty() ? "the job in the environment" : "the job " + job->launcher + " started";
      // Every rank says it: whichever exits first ends the job, perhaps before rank 0 has printed.
      std::fprintf(stderr,
                   "dp_vs_ddp: runs single and dp in this process and starts its own %d DDP processes, so it "
                   "cannot be rank %d of %d of %s; run it directly (--devices N)\n",
                   o.devices, job->rank, job->world_size, whose.c_str());
      return 2;
    }
    return bench::run_parent(o, argc, argv);
  } catch (const std::exception& e) {
    const std::string what = e.what();  // the benchmark's own errors already start with its name
    std::fprintf(stderr, "%s%s\n", what.rfind("dp_vs_ddp:", 0) == 0 ? "" : "dp_vs_ddp: ", what.c_str());
    return 2;
  }
}
