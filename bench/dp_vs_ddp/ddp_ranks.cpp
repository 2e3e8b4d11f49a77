// bench/dp_vs_ddp/ddp_ranks.cpp: the DDP variants, run by each of the N processes the benchmark
// starts (bench_launch.h). Every rank trains its shard of the same global batches; per step the
// slowest rank's time counts, as a synchronous job moves at the pace of its slowest member.
#include <ringgrad/ringgrad.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "modes.h"
#include "peak_memory.h"

namespace bench {

using namespace ringgrad;
using Clock = std::chrono::steady_clock;

std::string result_side_file(const std::string& result_file, const std::string& what) {
  return result_file + "." + what;
}

namespace {

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
Clock::time_point plus_us(Clock::time_point t, double us) {
  return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::micro>(us));
}

// Element-wise op over ranks of a host vector (through the process group, on `device`).
std::vector<double> reduce_over_ranks(parallel::ProcessGroup& pg, const std::vector<double>& values, Device device,
                                      parallel::ReduceOp op) {
  Tensor t = from_vector(values, {static_cast<int64_t>(values.size())}).to(device);
  pg.all_reduce(t, op)->wait();
  return t.to(Device::cpu()).to_vector<double>();
}

// One rank's part of one variant: times the steps, and returns what rank 0 reports.
template <typename Model>
ModeResult run_variant(const Options& o, const DdpVariant& v, const std::shared_ptr<parallel::ProcessGroup>& group,
                       const Data& data, Device device, Trace& trace, std::vector<double>& final_params) {
  parallel::ProcessGroup& pg = *group;
  const int rank = pg.rank(), n = pg.size();
  reset_peak_memory(device);
  auto model = make_model<Model>(o, device);
  parallel::DistributedDataParallel<Model> ddp(model, group, v.options);
  nn::optim::SGD opt(ddp.parameters(), nn::optim::SGDOptions(o.lr).momentum(0.9));
  const std::vector<std::string> keys = {"forward", "backward", "comm", "exposed_comm", "copy_back", "optimizer"};
  std::map<std::string, std::vector<double>> parts;
  std::vector<double> step_ms, bucket_mb;
  pg.barrier()->wait();
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    const size_t k = static_cast<size_t>(s) % data.x.size();
    const auto t0 = Clock::now();
    opt.zero_grad();
    std::optional<typename parallel::DistributedDataParallel<Model>::NoSync> no_sync;
    if (!v.sync) no_sync.emplace(ddp.no_sync());
    const Tensor loss = loss_of(ddp(data.x[k]), data.y[k]);
    sync(device);
    const auto t1 = Clock::now();
    loss.backward();  // returns once the gradients are averaged (or, in no_sync, accumulated)
    sync(device);
    const auto t2 = Clock::now();
    opt.step();
    loss.item();
    const auto t3 = Clock::now();
    no_sync.reset();
    if (s < o.warmup) continue;
    step_ms.push_back(ms(t3 - t0));
    parts["optimizer"].push_back(ms(t3 - t2));
    if (!v.sync) {  // no reducer at work: the step's own clocks
      for (const char* key : {"comm", "exposed_comm", "copy_back"}) parts[key].push_back(0);
      parts["forward"].push_back(ms(t1 - t0));
      parts["backward"].push_back(ms(t2 - t1));
      if (s >= o.warmup + o.steps - o.trace_steps) {
        trace.slice(rank, 0, "forward", t0, t1, {{"step", s}});
        trace.slice(rank, 0, "backward", t1, t2, {{"step", s}});
        trace.slice(rank, 0, "optimizer", t2, t3, {{"step", s}});
      }
      continue;
    }
    const parallel::DDPTimings t = ddp.timings();
    double comm_ms = 0;  // the all-reduces run one after another on the communication thread
    bucket_mb.clear();   // the last step's buckets, in the order they were launched
    for (const parallel::BucketTiming& b : t.buckets) {
      comm_ms += ms(b.comm_end - b.comm_start);
      bucket_mb.push_back(static_cast<double>(b.bytes) / (1 << 20));
    }
    parts["forward"].push_back(ms(t1 - t0));           // zero_grad + forward + loss, as in every mode
    parts["backward"].push_back(t.backward_us / 1e3);  // compute only: without the wait and copy back
    parts["comm"].push_back(comm_ms);
    parts["exposed_comm"].push_back(t.exposed_comm_us / 1e3);
    parts["copy_back"].push_back(t.copy_back_us / 1e3);
    if (s >= o.warmup + o.steps - o.trace_steps) {
      trace.slice(rank, 0, "forward", t0, t1, {{"step", s}});
      trace.slice(rank, 0, "backward", t.backward_start, t.backward_end, {{"step", s}});
      trace.slice(rank, 0, "wait for all-reduce", t.backward_end, plus_us(t.backward_end, t.exposed_comm_us),
                  {{"step", s}});
      trace.slice(rank, 0, "optimizer", t2, t3, {{"step", s}});
      for (const parallel::BucketTiming& b : t.buckets) {
        trace.instant(rank, 0, "bucket " + std::to_string(b.index) + " ready", b.ready);
        trace.slice(rank, 1, "all-reduce bucket " + std::to_string(b.index), b.comm_start, b.comm_end,
                    {{"step", s}, {"bytes", b.bytes}, {"parameters", b.parameters}});
      }
    }
  }
  ModeResult r;
  r.mode = v.mode;
  r.id = v.id();
  r.devices = n;
  r.cap_mb = v.cap_mb;
  r.first_cap_mb = v.mode == "ddp-bucketed" ? v.options.first_bucket_cap_mb() : NAN;
  r.bucket_mb = bucket_mb;
  r.step_ms = reduce_over_ranks(pg, step_ms, device, parallel::ReduceOp::Max);
  for (const std::string& key : keys) {
    // Each step's component averaged over the ranks, then the median over the steps.
    std::vector<double> mean = reduce_over_ranks(pg, parts[key], device, parallel::ReduceOp::Avg);
    r.breakdown_ms[key] = stats_of(mean).median;
  }
  std::vector<double> peak(n, 0.0);
  peak[rank] = peak_memory_mb(device);
  r.peak_memory_mb = reduce_over_ranks(pg, peak, device, parallel::ReduceOp::Sum);
  // Synchronised steps from identical weights keep every replica bitwise identical: compare each
  // rank's parameters with the element-wise max and min over ranks.
  final_params = flat_parameters(ddp.parameters());
  const std::vector<double> hi = reduce_over_ranks(pg, final_params, device, parallel::ReduceOp::Max);
  const std::vector<double> lo = reduce_over_ranks(pg, final_params, device, parallel::ReduceOp::Min);
  r.replicas_identical = !v.sync || hi == lo;  // without sync the replicas drift apart, as they should
  r.checked = v.sync;
  return r;
}

// All-reduce times of `bytes` on this group (median of 20 after 5 untimed), for the scaling model.
double time_allreduce_us(parallel::ProcessGroup& pg, int64_t bytes, Device device) {
  Tensor t = zeros({std::max<int64_t>(1, bytes / 4)}, TensorOptions(DType::f32).device(device));
  std::vector<double> us;
  for (int rep = 0; rep < 25; ++rep) {
    pg.barrier()->wait();
    const auto start = Clock::now();
    pg.all_reduce(t)->wait();
    sync(device);
    if (rep >= 5) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return stats_of(reduce_over_ranks(pg, us, device, parallel::ReduceOp::Max)).median;
}

}  // namespace

int run_ddp_rank(const Options& o) {
  CountingHostAllocator::install();
  const char* result_file = std::getenv("BENCH_RESULT_FILE");
  RINGGRAD_CHECK(result_file != nullptr,
                 "dp_vs_ddp: a rank needs BENCH_RESULT_FILE (dp_vs_ddp starts its own ranks: "
                 "run it directly, not under ringrun or torchrun)");
  const int gpus = o.device == "cuda" ? cuda_device_count() : 0;
  RINGGRAD_CHECK(o.device != "cuda" || gpus > 0, "dp_vs_ddp: --device cuda, but this process sees no GPU");
  // --backend auto: NCCL needs a GPU per rank (and a build with NCCL); otherwise ranks share GPUs
  // over the ring. parse() has checked that a chosen backend is in this build and fits --device.
  const std::string automatic = gpus >= o.devices && parallel::nccl_available() ? "nccl" : "ring";
  const std::string backend = o.backend == "auto" ? automatic : o.backend;
  auto pg = parallel::init_process_group(backend);
  const int rank = pg->rank();
  const Device device = o.device == "cuda" ? Device::cuda(rank % gpus) : Device::cpu(0);
  if (device.is_cpu()) {
    // This rank's share of the cores, for the main thread (forward) and cpu:0's worker (backward).
    const int threads = o.threads_per_device();
    set_num_threads(threads);
    run_on(device, [threads] { set_num_threads(threads); }).get();
  }
  const Data data = shard(make_data(o), rank, pg->size(), device);
  std::ofstream out;
  if (rank == 0) {
    out.open(result_file, std::ios::app);
    RINGGRAD_CHECK(out.good(), "dp_vs_ddp: rank 0 cannot write its results to ", result_file);
  }
  for (const DdpVariant& v : ddp_variants(o)) {
    Trace trace;
    trace.name_process(rank, "DDP rank " + std::to_string(rank) + " (" + device.str() + ")");
    trace.name_thread(rank, 0, "main thread + backward");
    trace.name_thread(rank, 1, "communication thread (" + backend + ")");
    std::vector<double> params;
    const ModeResult r = with_model(o, [&](auto type) {
      return run_variant<typename decltype(type)::type>(o, v, pg, data, device, trace, params);
    });
    if (!o.trace_dir.empty()) {
      std::ofstream events(result_side_file(result_file, "trace." + v.id() + "." + std::to_string(rank)));
      events << trace.events().dump();
    }
    if (rank != 0) continue;
    std::ofstream(result_side_file(result_file, "params." + v.id()), std::ios::binary)
        .write(reinterpret_cast<const char*>(params.data()),
               static_cast<std::streamsize>(params.size() * sizeof(double)));
    out << nlohmann::json{{"result", to_wire(r)}}.dump() << std::endl;
  }
  if (o.scaling_model) {
    int64_t param_bytes = 0;
    for (int64_t b : parameter_bytes(o)) param_bytes += b;
    // Two sizes: 4 KB (latency-bound) and the gradients' size, at least 4 MiB (bandwidth-bound).
    const int64_t large_bytes = std::max<int64_t>(param_bytes, int64_t{4} << 20);
    const double small_us = time_allreduce_us(*pg, 4096, device);
    const double large_us = time_allreduce_us(*pg, large_bytes, device);
    if (rank == 0)
      out << nlohmann::json{{"allreduce",
                             {{"ranks", pg->size()},
                              {"backend", backend},
                              {"small_bytes", 4096},
                              {"small_us", small_us},
                              {"large_bytes", large_bytes},
                              {"large_us", large_us}}}}
                 .dump()
          << std::endl;
  }
  pg->barrier()->wait();
  return 0;
}

}  // namespace bench
