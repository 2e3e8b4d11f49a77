// bench/bench_allreduce.cpp: all-reduce bandwidth and latency of the ring, in nccl-tests' columns.
//
//   ./build/bench/bench_allreduce                      # 2 ranks on this machine, shm and tcp, 4 B .. 256 MB
//   ./build/bench/bench_allreduce --nproc 4 --transport shm --max-bytes 64M --json allreduce.json
//   ./build/bench/bench_allreduce --nproc 8 --backend nccl    # NCCL, one GPU per rank (needs >= 2 GPUs)
//
// Started by hand (not as one of its own ranks, bench_launch.h), the program launches itself --nproc
// times as the ranks of a job (like torch.multiprocessing.spawn), waits, and then -- in the same run -- measures the
// references that are installed: torch.distributed with gloo (bench/torch_allreduce.py, Debian's
// python3-torch) and Open MPI's MPI_Allreduce (bench/mpi_allreduce.c, when mpicc and mpirun exist).
// It ends with a table of ratios against those references.
//
// Per size: `warmup` untimed all-reduces, then `iters` timed ones (fewer for large sizes); time is
// the mean per all-reduce, the slowest rank's. algbw = bytes / time; busbw = algbw * 2(n-1)/n, the
// rate each rank's link actually carried, comparable with the link's peak and across world sizes.
// #wrong counts elements that differ from the exact answer in a separate checked all-reduce.
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

using namespace ringgrad;

namespace {

struct Options {
  int nproc = 2;
  std::vector<std::string> transports = {"shm", "tcp"};
  int64_t min_bytes = 4, max_bytes = 256ll << 20;
  int warmup = 5;
  std::string json;
  bool references = true;
};

int64_t parse_bytes(const std::string& text) {
  const char unit = text.empty() ? 0 : text.back();
  const int64_t scale = unit == 'K' ? 1 << 10 : unit == 'M' ? 1 << 20 : unit == 'G' ? 1 << 30 : 1;
  return std::stoll(scale == 1 ? text : text.substr(0, text.size() - 1)) * scale;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--no-references") { o.references = false; continue; }
    if (flag == "--help") {
      std::printf("usage: bench_allreduce [--nproc N] [--transport shm|tcp|all] [--backend ring|nccl] [--min-bytes B] [--max-bytes B]\n"
                  "                       [--warmup W] [--json FILE] [--no-references]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) throw Error("bench_allreduce: " + flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--nproc") o.nproc = std::stoi(value);
    else if (flag == "--transport") o.transports = value == "all" ? std::vector<std::string>{"shm", "tcp"} : std::vector<std::string>{value};
    else if (flag == "--backend") o.transports = value == "nccl" ? std::vector<std::string>{"nccl"} : o.transports;
    else if (flag == "--min-bytes") o.min_bytes = parse_bytes(value);
    else if (flag == "--max-bytes") o.max_bytes = parse_bytes(value);
    else if (flag == "--warmup") o.warmup = std::stoi(value);
    else if (flag == "--json") o.json = value;
    else throw Error("bench_allreduce: unknown flag " + flag);
  }
  return o;
}

std::vector<int64_t> sizes(const Options& o) {
  std::vector<int64_t> out;
  for (int64_t b = o.min_bytes; b <= o.max_bytes; b *= 4) out.push_back(b);
  return out;
}

// Enough timed iterations for about 0.2 s per size, at least 5 and at most 1000.
int iterations_for(int64_t bytes) { return static_cast<int>(std::clamp<int64_t>((200ll << 20) / std::max<int64_t>(bytes, 1 << 16), 5, 1000)); }

// One row per size: bytes, seconds per all-reduce, wrong elements.
struct Row {
  int64_t bytes;
  double seconds;
  int64_t wrong;
};

// --- a rank ----------------------------------------------------------------------------------------

// `device`: where the buffers live -- the CPU for the ring, this rank's GPU for NCCL.
std::vector<Row> measure(parallel::ProcessGroup& pg, const Options& o, Device device) {
  std::vector<Row> rows;
  for (int64_t bytes : sizes(o)) {
    const int64_t count = std::max<int64_t>(1, bytes / 4);
    Tensor t = zeros({count}, device);  // zeros stay zeros under sum: no overflow, no denormals
    for (int i = 0; i < o.warmup; ++i) pg.all_reduce(t)->wait();
    const int iters = iterations_for(bytes);
    pg.barrier()->wait();
    const auto start = bench::Clock::now();
    for (int i = 0; i < iters; ++i) pg.all_reduce(t)->wait();
    if (device.is_cuda()) cuda_synchronize(device.index);  // wait() orders the GPU, not the host
    Tensor seconds = full({1}, bench::seconds_since(start) / iters, TensorOptions(DType::f64).device(device));
    pg.all_reduce(seconds, parallel::ReduceOp::Max)->wait();  // the slowest rank sets the pace

    Tensor check = full({count}, static_cast<double>(pg.rank() + 1), device);
    pg.all_reduce(check)->wait();
    const float want = static_cast<float>(pg.size() * (pg.size() + 1) / 2);
    int64_t wrong = 0;
    for (float v : check.to_vector<float>()) wrong += v != want;
    Tensor wrong_total = full({1}, static_cast<double>(wrong), TensorOptions(DType::f64).device(device));
    pg.all_reduce(wrong_total)->wait();
    rows.push_back({count * 4, seconds.item(), static_cast<int64_t>(wrong_total.item())});
  }
  return rows;
}

int run_rank(const Options& o) {
  const int base_port = std::atoi(std::getenv("MASTER_PORT"));
  std::ofstream results(std::getenv("BENCH_RESULT_FILE") ? std::getenv("BENCH_RESULT_FILE") : "/dev/null");
  for (size_t k = 0; k < o.transports.size(); ++k) {
    // A fresh group (and store, on the next port) per transport.
    const bool nccl = o.transports[k] == "nccl";  // one GPU per rank: cuda:LOCAL_RANK
    const parallel::InitOptions init =
        parallel::InitOptions().with_master("127.0.0.1", base_port + static_cast<int>(k)).with_transport(nccl ? "auto" : o.transports[k]);
    auto pg = parallel::init_process_group(nccl ? "nccl" : "ring", init);
    const Device device = nccl ? Device::cuda(parallel::read_launch_info(init).local_rank) : Device::cpu();
    const std::vector<Row> rows = measure(*pg, o, device);
    if (pg->rank() == 0)
      for (const Row& r : rows) results << o.transports[k] << ' ' << r.bytes << ' ' << r.seconds << ' ' << r.wrong << '\n';
    pg->barrier()->wait();
    parallel::destroy_process_group();
  }
  return 0;
}

// --- the launcher and the report ----------------------------------------------------------------------

// Rows "name bytes seconds wrong" from a reference program's stdout (lines starting with "row ").
std::map<std::string, std::map<int64_t, double>> parse_reference(const std::string& text,
                                                                 std::map<std::string, std::map<int64_t, double>> into) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string tag, name;
    int64_t bytes;
    double seconds;
    if (f >> tag >> name >> bytes >> seconds && tag == "row") into[name][bytes] = seconds;
  }
  return into;
}

int report(const Options& o, const std::string& result_file) {
  std::map<std::string, std::map<int64_t, double>> seconds;  // by transport, then size
  std::map<std::string, std::map<int64_t, int64_t>> wrong;
  {
    std::ifstream in(result_file);
    std::string name;
    int64_t bytes, w;
    double s;
    while (in >> name >> bytes >> s >> w) {
      const std::string label = name == "nccl" ? name : "ring-" + name;
      seconds[label][bytes] = s;
      wrong[label][bytes] = w;
    }
  }
  const double bus = 2.0 * (o.nproc - 1) / o.nproc;
  std::vector<bench::Table> tables;
  int64_t total_wrong = 0;
  for (const auto& [name, by_size] : seconds) {
    bench::Table table(name, {{"size", "B", 11}, {"count", "elements", 11}, {"time", "us", 9}, {"algbw", "GB/s", 8},
                              {"busbw", "GB/s", 8}, {"#wrong", "", 7}});
    double busbw_sum = 0;
    for (const auto& [bytes, s] : by_size) {
      const double algbw = bytes / s / 1e9;
      busbw_sum += algbw * bus;
      total_wrong += wrong[name][bytes];
      table.add_row({std::to_string(bytes), std::to_string(bytes / 4), bench::fmt(s * 1e6, 1), bench::fmt(algbw, 2),
                     bench::fmt(algbw * bus, 2), std::to_string(wrong[name][bytes])});
    }
    std::printf("# ringgrad bench_allreduce  backend=%s  world=%d  dtype=float32  warmup=%d  commit=%s\n#\n",
                name.c_str(), o.nproc, o.warmup, RINGGRAD_BENCH_COMMIT);
    table.print(stdout);
    std::printf("# Avg bus bandwidth : %.2f\n\n", busbw_sum / static_cast<double>(by_size.size()));
    tables.push_back(std::move(table));
  }

  // References, measured now on the same machine and sizes.
  std::map<std::string, std::map<int64_t, double>> refs;
  if (o.references) {
    std::string out;
    const std::string size_args = " --world " + std::to_string(o.nproc) + " --min-bytes " + std::to_string(o.min_bytes) +
                                  " --max-bytes " + std::to_string(o.max_bytes);
    if (bench::run_command("/usr/bin/python3 " + bench::shell_quote(std::string(RINGGRAD_BENCH_DIR) + "/torch_allreduce.py") +
                               size_args + " 2>/dev/null", out) == 0)
      refs = parse_reference(out, refs);
    else
      std::printf("# torch.distributed (gloo): not measured (needs /usr/bin/python3 with Debian's python3-torch)\n");
    if (bench::run_command("command -v mpicc >/dev/null && command -v mpirun >/dev/null", out) == 0) {
      const std::string exe = "/tmp/ringgrad_mpi_allreduce_" + std::to_string(::getpid());
      if (bench::run_command("mpicc -O2 -o " + exe + " " + bench::shell_quote(std::string(RINGGRAD_BENCH_DIR) + "/mpi_allreduce.c") +
                                 " && mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(o.nproc) + " " +
                                 exe + size_args + " 2>/dev/null; rm -f " + exe, out) == 0)
        refs = parse_reference(out, refs);
    } else {
      std::printf("# MPI_Allreduce (Open MPI): not measured (needs mpicc and mpirun: Debian's libopenmpi-dev, openmpi-bin)\n");
    }
  }
  if (!refs.empty()) {
    std::vector<bench::Column> columns = {{"size", "B", 11}};
    for (const auto& [name, by_size] : seconds) columns.push_back({name, "GB/s", 9});
    for (const auto& [name, by_size] : refs) columns.push_back({name, "GB/s", 9});
    for (const auto& [name, by_size] : seconds)
      for (const auto& [ref, ref_sizes] : refs) columns.push_back({(name.rfind("ring-", 0) == 0 ? name.substr(5) : name) + "/" + ref, "", 9});
    bench::Table compare("busbw", columns);
    for (const auto& [bytes, s] : seconds.begin()->second) {
      std::vector<std::string> row = {std::to_string(bytes)};
      auto busbw = [&](const std::map<int64_t, double>& m) {
        auto it = m.find(bytes);
        return it == m.end() ? NAN : bytes / it->second / 1e9 * bus;
      };
      for (const auto& [name, by_size] : seconds) row.push_back(bench::fmt(busbw(by_size), 2));
      for (const auto& [name, by_size] : refs) row.push_back(bench::fmt(busbw(by_size), 2));
      for (const auto& [name, by_size] : seconds)
        for (const auto& [ref, ref_sizes] : refs) row.push_back(bench::fmt(busbw(by_size) / busbw(ref_sizes), 2));
      compare.add_row(row);
    }
    std::printf("# bus bandwidth against the references, measured in this run (ratio > 1: ringgrad is faster)\n#\n");
    compare.print(stdout);
    tables.push_back(std::move(compare));
  }
  if (!o.json.empty()) {
    std::vector<const bench::Table*> list;
    for (const auto& t : tables) list.push_back(&t);
    if (!bench::write_json(o.json, "bench_allreduce", {{"world", std::to_string(o.nproc)}, {"commit", RINGGRAD_BENCH_COMMIT}}, list))
      std::fprintf(stderr, "bench_allreduce: cannot write %s\n", o.json.c_str());
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    if (bench::is_rank()) return run_rank(o);
    return bench::launch_and_report("bench_allreduce", o.nproc, argv, [&](const std::string& file) { return report(o, file); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce: %s\n", e.what());
    return 2;
  }
}
