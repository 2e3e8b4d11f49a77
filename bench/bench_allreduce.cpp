// bench/bench_allreduce.cpp: all-reduce bandwidth and latency of the ring, in nccl-tests' columns.
//
//   ./build/bench/bench_allreduce                      # 2 ranks on this machine, shm, tcp and gloo, 4 B .. 256 MB
//   ./build/bench/bench_allreduce --nproc 4 --transport shm --max-bytes 64M --json allreduce.json
//   ./build/bench/bench_allreduce --nproc 8 --backend nccl    # NCCL, one GPU per rank (needs >= 2 GPUs)
//
// Started by hand, the program launches itself --nproc times as the ranks of a job (like
// torch.multiprocessing.spawn); under ringrun or torchrun it is a rank of theirs (bench_launch.h).
// Rank 0 prints the tables and then -- in the same run -- measures the references that are
// installed: torch.distributed with gloo (bench/torch_allreduce.py, Debian's python3-torch) and Open MPI's
// MPI_Allreduce (bench/mpi_allreduce.c, when mpicc and mpirun exist). It ends with a table of ratios against those
// references.
//
// Per size: `warmup` untimed all-reduces, then `iters` timed ones (fewer for large sizes); time is
// the mean per all-reduce, the slowest rank's; min, median and max are those of single all-reduces
// (each the slowest rank's), so that outliers show. algbw = bytes / time; busbw = algbw * 2(n-1)/n,
// the rate each rank's link actually carried, comparable with the link's peak and across world
// sizes. memcpy: one thread's memcpy of the same size on every rank at once, in the same run -- the
// yardstick for the shm transport, whose steps are copies and reductions.
// #wrong counts elements that differ from the exact answer in a separate checked all-reduce.
#include <ringgrad/ringgrad.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_launch.h"
#include "bench_util.h"
#include "tools/cli/flags.h"

using namespace ringgrad;

namespace {

struct Options {
  int nproc = 2;
  int hosts = 1;         // > 1: the ranks spread over emulated hosts (tools/on_hosts.sh)
  double link_gbit = 0;  // their links' speed, Gbit/s; 0: unshaped
  std::vector<std::string> transports = {"shm", "tcp"};
  int64_t min_bytes = 4, max_bytes = 256ll << 20;
  int warmup = 5;
  std::string json;
  bool references = true;
};

// "4096", "64K", "256M", "1G" -> bytes; nullopt for anything else.
std::optional<int64_t> parse_bytes(const std::string& text) {
  const char unit = text.empty() ? 0 : text.back();
  const int64_t scale = unit == 'K' ? 1 << 10 : unit == 'M' ? 1 << 20 : unit == 'G' ? 1 << 30 : 1;
  const std::optional<int64_t> n =
      ringgrad::cli::parse_integer<int64_t>(scale == 1 ? text : text.substr(0, text.size() - 1));
  if (!n || *n < 1 || *n > (int64_t{16} << 30) / scale) return std::nullopt;  // 1 B .. 16 GB
  return *n * scale;
}

// The other way: 268435456 -> "256M".
std::string format_bytes(int64_t bytes) {
  for (auto [unit, scale] :
       {std::pair{"G", int64_t{1} << 30}, std::pair{"M", int64_t{1} << 20}, std::pair{"K", int64_t{1} << 10}})
    if (bytes % scale == 0) return std::to_string(bytes / scale) + unit;
  return std::to_string(bytes);
}

Options parse(int argc, char** argv) {
  Options o;
  std::string transport = "all", backend = "ring";
  ringgrad::cli::FlagParser flags(
      "bench_allreduce", "All-reduce bandwidth and latency of the ring, next to gloo and Open MPI where installed.");
  flags.add_int("--nproc", &o.nproc, "ranks of the job, started on this machine (with --hosts: over all hosts)", 1,
                1024);
  flags.add_int("--hosts", &o.hosts,
                "emulated hosts the ranks are spread over (network namespaces, needs root); 1: this machine", 1, 32);
  flags.add_double("--link-gbit", &o.link_gbit, "with --hosts: each host's link speed in Gbit/s; 0: unshaped", 0.0,
                   1e4);
  flags.add_choice("--transport", &transport, {"shm", "tcp", "auto", "all"},
                   "the ring's links between ranks; auto: each link picks (shm inside a host, tcp between hosts); "
                   "all: shm, tcp, then the gloo backend in builds with Gloo (with --hosts: auto, tcp, gloo)");
  flags.add_choice("--backend", &backend, {"ring", "gloo", "nccl"},
                   "ringgrad's ring, its gloo backend, or NCCL with one GPU per rank");
  auto add_bytes = [&flags](const char* name, int64_t* target, const char* help) {
    flags.add_custom(
        name, "B", help, "a byte count from 1 to 16G, such as 4096, 64K, 256M or 1G",
        [target](const std::string& text) {
          const std::optional<int64_t> bytes = parse_bytes(text);
          if (bytes) *target = *bytes;
          return bytes.has_value();
        },
        [target] { return format_bytes(*target); });
  };
  add_bytes("--min-bytes", &o.min_bytes, "smallest size; each row is 4x the one before");
  add_bytes("--max-bytes", &o.max_bytes, "largest size");
  flags.add_int("--warmup", &o.warmup, "untimed all-reduces before each size", 0, 1000000);
  flags.add_string("--json", &o.json, "also write the rows to this file").metavar("FILE");
  bool no_references = false;
  flags.add_bool("--no-references", &no_references, "skip the gloo and MPI references");
  flags.parse(argc, argv);
  if (const std::string why = bench::unwritable_output({{"--json", o.json}}); !why.empty()) flags.exit_with_usage(why);
  o.references = !no_references;
  if (backend == "gloo" && !parallel::gloo_available())
    flags.exit_with_usage("--backend gloo needs a build with Gloo (apt-get install libgloo-dev, then configure again)");
  if (backend == "nccl")
    o.transports = {"nccl"};
  else if (backend == "gloo")
    o.transports = {"gloo"};  // "transport" gloo: ringgrad's gloo backend
  else if (transport != "all")
    o.transports = {transport};
  if (transport == "all" && backend == "ring" && o.hosts > 1)
    o.transports = {"auto", "tcp"};  // across hosts: shm inside each, tcp between; and tcp everywhere
  if (transport == "all" && backend == "ring" && parallel::gloo_available())
    o.transports.push_back("gloo");  // the ring and Gloo, through the same ProcessGroup API, in one run
  if (o.hosts > 1 && transport == "shm")
    flags.exit_with_usage(
        "--transport shm cannot join ranks on different hosts; use auto (shm inside a host, tcp "
        "between) or tcp");
  if (o.hosts > 1 && !flags.was_set("--nproc")) o.nproc = o.hosts;  // one rank per host
  if (o.hosts > 1 && o.nproc % o.hosts != 0)
    flags.exit_with_usage("--nproc must divide by --hosts (every host runs the same number of ranks), got --nproc " +
                          std::to_string(o.nproc) + " and --hosts " + std::to_string(o.hosts));
  if (o.hosts > 1 && backend == "nccl")
    flags.exit_with_usage("--hosts emulates hosts for CPU ranks; --backend nccl needs a GPU per rank");
  if (flags.was_set("--link-gbit") && o.hosts == 1)
    flags.exit_with_usage("--link-gbit shapes the links between emulated hosts: it needs --hosts 2 or more");
  if (o.min_bytes > o.max_bytes)
    flags.exit_with_usage("--min-bytes " + std::to_string(o.min_bytes) + " is larger than --max-bytes " +
                          std::to_string(o.max_bytes) + ": no size to measure");
  return o;
}

std::vector<int64_t> sizes(const Options& o) {
  std::vector<int64_t> out;
  for (int64_t b = o.min_bytes; b <= o.max_bytes; b *= 4) out.push_back(b);
  return out;
}

// Enough timed iterations for about 0.2 s per size, at least 5 and at most 1000.
int iterations_for(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>((200ll << 20) / std::max<int64_t>(bytes, 1 << 16), 5, 1000));
}

// One row per size: bytes, seconds per all-reduce (mean, and the spread of single ones), wrong
// elements, and the memcpy reference.
struct Row {
  int64_t bytes;
  double seconds;
  int64_t wrong;
  double min_seconds, median_seconds, max_seconds;  // of single all-reduces, each the slowest rank's
  double memcpy_seconds;                            // one memcpy of `bytes` on one thread, every rank at once
};

// Single-thread memcpy of `bytes`, timed on every rank at the same moment as the all-reduce runs
// (each rank's core copies its own buffers): what one core's memory traffic can move. An all-reduce
// moving data at that rate or better does no more copying than necessary. Mean over `iters`.
double memcpy_seconds(parallel::ProcessGroup& pg, int64_t bytes, int iters) {
  std::vector<uint8_t> from(static_cast<size_t>(bytes), 1), to(static_cast<size_t>(bytes), 0);
  std::memcpy(to.data(), from.data(), from.size());  // faults both in before the clock starts
  pg.barrier()->wait();
  const auto start = bench::Clock::now();
  for (int i = 0; i < iters; ++i) {
    from[static_cast<size_t>(i) % from.size()] = static_cast<uint8_t>(i);  // keeps each copy from being elided
    std::memcpy(to.data(), from.data(), from.size());
  }
  const double seconds = bench::seconds_since(start) / iters;
  Tensor slowest = full({1}, seconds + static_cast<double>(to[0] == 255) * 1e-12, DType::f64);
  pg.all_reduce(slowest, parallel::ReduceOp::Max)->wait();
  return slowest.item();
}

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
    // Each all-reduce timed on its own as well, so that the spread shows: a median far below the
    // mean, or a max far above it, is a few slow ones (a nap too long, a descheduled thread), not
    // a slow algorithm.
    std::vector<double> single(static_cast<size_t>(iters));
    const auto start = bench::Clock::now();
    for (int i = 0; i < iters; ++i) {
      const auto one = bench::Clock::now();
      pg.all_reduce(t)->wait();
      if (device.is_cuda()) cuda_synchronize(device.index);  // wait() orders the GPU, not the host
      single[static_cast<size_t>(i)] = bench::seconds_since(one);
    }
    Tensor seconds = full({1}, bench::seconds_since(start) / iters, TensorOptions(DType::f64).device(device));
    pg.all_reduce(seconds, parallel::ReduceOp::Max)->wait();  // the slowest rank sets the pace
    // The i-th all-reduce's time is the slowest rank's: the ranks run them in lockstep.
    Tensor spread = from_vector(single, {iters}).to(device);
    pg.all_reduce(spread, parallel::ReduceOp::Max)->wait();
    std::vector<double> sorted = spread.to(Device::cpu()).to_vector<double>();
    std::sort(sorted.begin(), sorted.end());

    Tensor check = full({count}, static_cast<double>(pg.rank() + 1), device);
    pg.all_reduce(check)->wait();
    const float want = static_cast<float>(pg.size() * (pg.size() + 1) / 2);
    int64_t wrong = 0;
    for (float v : check.to_vector<float>()) wrong += v != want;
    Tensor wrong_total = full({1}, static_cast<double>(wrong), TensorOptions(DType::f64).device(device));
    pg.all_reduce(wrong_total)->wait();
    const double memcpy_s = device.is_cuda() ? NAN : memcpy_seconds(pg, count * 4, iters);
    rows.push_back({count * 4, seconds.item(), static_cast<int64_t>(wrong_total.item()), sorted.front(),
                    bench::median(sorted), sorted.back(), memcpy_s});
  }
  return rows;
}

int report(const Options& o, const std::string& results);

int run_rank(const Options& o) {
  const int base_port = std::atoi(std::getenv("MASTER_PORT"));
  std::ostringstream results;  // rank 0's rows: "transport bytes seconds wrong"
  bool lead = false;
  for (size_t k = 0; k < o.transports.size(); ++k) {
    // A fresh group (and store, on the next port) per transport.
    const bool nccl = o.transports[k] == "nccl";  // one GPU per rank: cuda:LOCAL_RANK
    const bool gloo = o.transports[k] == "gloo";  // ringgrad's gloo backend, on the CPU
    const parallel::InitOptions init = parallel::InitOptions()
                                           .master_addr(std::getenv("MASTER_ADDR"))
                                           .master_port(base_port + static_cast<int>(k))
                                           .transport(nccl || gloo ? "auto" : o.transports[k]);
    auto pg = parallel::init_process_group(nccl ? "nccl" : gloo ? "gloo" : "ring", init);
    const Device device = nccl ? Device::cuda(parallel::read_launch_info(init).local_rank) : Device::cpu();
    const std::vector<Row> rows = measure(*pg, o, device);
    lead = pg->rank() == 0;
    if (lead)
      for (const Row& r : rows)
        results << o.transports[k] << ' ' << r.bytes << ' ' << r.seconds << ' ' << r.wrong << ' ' << r.min_seconds
                << ' ' << r.median_seconds << ' ' << r.max_seconds << ' ' << r.memcpy_seconds << '\n';
    pg->barrier()->wait();
    parallel::destroy_process_group();
  }
  return lead ? report(o, results.str()) : 0;
}

// --- the launcher and the report ----------------------------------------------------------------------

// "hosts=2 (emulated, 1 Gbit/s links)", or "hosts=1".
std::string hosts_text(const Options& o) {
  if (o.hosts == 1) return "hosts=1";
  char speed[48];
  std::snprintf(speed, sizeof speed, "%g Gbit/s links", o.link_gbit);
  return "hosts=" + std::to_string(o.hosts) + " (emulated, " + (o.link_gbit > 0 ? speed : "unshaped links") + ")";
}

// How rank 0 starts Open MPI's reference on the same hosts as the job: across emulated hosts,
// mpirun reaches the other namespaces through tools/netns_rsh_agent.sh (its "ssh") and sends over
// their eth0, the shaped links, as the ring does; on one machine, plain local ranks.
std::string mpirun_command(const Options& o) {
  std::string cmd = "mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(o.nproc);
  const char* cluster_addrs = std::getenv("RINGGRAD_CLUSTER_ADDRS");
  if (o.hosts == 1 || cluster_addrs == nullptr) return cmd;
  std::istringstream addrs(cluster_addrs);
  std::string list;
  for (std::string a; addrs >> a;) list += (list.empty() ? "" : ",") + a + ":" + std::to_string(o.nproc / o.hosts);
  return cmd + " --host " + list + " --mca plm_rsh_agent " +
         bench::shell_quote(std::string(RINGGRAD_BENCH_DIR) + "/../tools/netns_rsh_agent.sh") +
         " --mca oob_tcp_if_include eth0 --mca btl self,tcp --mca btl_tcp_if_include eth0 -x "
         "RINGGRAD_CLUSTER_HOSTS";
}

// Rows "name bytes seconds wrong" from a reference program's stdout (lines starting with "row ").
std::map<std::string, std::map<int64_t, double>> parse_reference(
    const std::string& text, std::map<std::string, std::map<int64_t, double>> into) {
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

int report(const Options& o, const std::string& results) {
  std::map<std::string, std::map<int64_t, double>> seconds;  // by transport, then size
  std::map<std::string, std::map<int64_t, int64_t>> wrong;
  std::map<std::string, std::map<int64_t, std::vector<double>>> spread;  // min, median, max, memcpy (s)
  {
    std::istringstream in(results);
    std::string name;
    int64_t bytes, w;
    double s, lo, mid, hi, copy;
    while (in >> name >> bytes >> s >> w >> lo >> mid >> hi >> copy) {
      const std::string label = name == "nccl" || name == "gloo" ? name : "ring-" + name;
      seconds[label][bytes] = s;
      wrong[label][bytes] = w;
      spread[label][bytes] = {lo, mid, hi, copy};
    }
  }
  const double bus = 2.0 * (o.nproc - 1) / o.nproc;
  std::vector<bench::Table> tables;
  int64_t total_wrong = 0;
  for (const auto& [name, by_size] : seconds) {
    bench::Table table(name, {{"size", "B", 11},
                              {"count", "elements", 11},
                              {"time", "us", 9},
                              {"min", "us", 8},
                              {"median", "us", 8},
                              {"max", "us", 8},
                              {"algbw", "GB/s", 8},
                              {"busbw", "GB/s", 8},
                              {"memcpy", "GB/s", 8},
                              {"#wrong", "", 7}});
    double busbw_sum = 0;
    for (const auto& [bytes, s] : by_size) {
      const double algbw = bytes / s / 1e9;
      busbw_sum += algbw * bus;
      total_wrong += wrong[name][bytes];
      const std::vector<double>& sp = spread[name][bytes];
      table.add_row({std::to_string(bytes), std::to_string(bytes / 4), bench::fmt(s * 1e6, 1),
                     bench::fmt(sp[0] * 1e6, 1), bench::fmt(sp[1] * 1e6, 1), bench::fmt(sp[2] * 1e6, 1),
                     bench::fmt(algbw, 2), bench::fmt(algbw * bus, 2), bench::fmt(bytes / sp[3] / 1e9, 2),
                     std::to_string(wrong[name][bytes])});
    }
    std::printf("# ringgrad bench_allreduce  backend=%s  world=%d  %s  dtype=float32  warmup=%d  commit=%s\n",
                name.c_str(), o.nproc, hosts_text(o).c_str(), o.warmup, RINGGRAD_BENCH_COMMIT);
    std::printf("%s\n#\n", bench::machine_header().c_str());
    table.print(stdout);
    std::printf("# Avg bus bandwidth : %.2f\n\n", busbw_sum / static_cast<double>(by_size.size()));
    tables.push_back(std::move(table));
  }

  // References, measured now on the same machine and sizes.
  std::map<std::string, std::map<int64_t, double>> refs;
  if (o.references) {
    std::string out;
    const std::string size_args = " --world " + std::to_string(o.nproc) + " --min-bytes " +
                                  std::to_string(o.min_bytes) + " --max-bytes " + std::to_string(o.max_bytes);
    if (o.hosts > 1)  // torch_allreduce.py starts its ranks on one host
      std::printf("# torch.distributed (gloo): not measured across hosts (the gloo row is Gloo across them)\n");
    else if (bench::run_command("/usr/bin/python3 " +
                                    bench::shell_quote(std::string(RINGGRAD_BENCH_DIR) + "/torch_allreduce.py") +
                                    size_args + " 2>/dev/null",
                                out) == 0)
      refs = parse_reference(out, refs);
    else
      std::printf("# torch.distributed (gloo): not measured (needs /usr/bin/python3 with Debian's python3-torch)\n");
    if (bench::run_command("command -v mpicc >/dev/null && command -v mpirun >/dev/null", out) == 0) {
      const std::string exe = "/tmp/ringgrad_mpi_allreduce_" + std::to_string(::getpid());
      // openmpi-bin alone has the mpicc wrapper but not mpi.h (libopenmpi-dev): a failed compile is
      // a note, not a compiler error in the middle of the table.
      if (bench::run_command("mpicc -O2 -o " + exe + " " +
                                 bench::shell_quote(std::string(RINGGRAD_BENCH_DIR) + "/mpi_allreduce.c") + " 2>&1",
                             out) != 0) {
        std::printf(
            "# MPI_Allreduce (Open MPI): not measured (mpicc cannot build bench/mpi_allreduce.c; needs Debian's "
            "libopenmpi-dev)\n");
      } else if (bench::run_command(mpirun_command(o) + " " + exe + size_args + " 2>&1", out) == 0) {
        refs = parse_reference(out, refs);
      } else {
        std::printf("# MPI_Allreduce (Open MPI): not measured (mpirun failed: %s)\n",
                    out.substr(0, out.find('\n')).c_str());
      }
      std::remove(exe.c_str());
    } else {
      std::printf(
          "# MPI_Allreduce (Open MPI): not measured (needs mpicc and mpirun: Debian's libopenmpi-dev, openmpi-bin)\n");
    }
  }
  if (!refs.empty()) {
    std::vector<bench::Column> columns = {{"size", "B", 11}};
    for (const auto& [name, by_size] : seconds) columns.push_back({name, "GB/s", 9});
    for (const auto& [name, by_size] : refs) columns.push_back({name, "GB/s", 9});
    for (const auto& [name, by_size] : seconds)
      for (const auto& [ref, ref_sizes] : refs)
        columns.push_back({(name.rfind("ring-", 0) == 0 ? name.substr(5) : name) + "/" + ref, "", 9});
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
    if (!bench::write_json(o.json, "bench_allreduce",
                           {{"world", std::to_string(o.nproc)}, {"commit", RINGGRAD_BENCH_COMMIT}}, list))
      std::fprintf(stderr, "bench_allreduce: cannot write %s\n", o.json.c_str());
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    if (const std::optional<int> status =
            bench::start_ranks_unless_in_job("bench_allreduce", o.nproc, argc, argv, "--nproc", o.hosts, o.link_gbit))
      return *status;
    return run_rank(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce: %s\n", e.what());
    return 2;
  }
}
