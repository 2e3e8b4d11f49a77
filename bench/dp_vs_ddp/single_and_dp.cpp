// bench/dp_vs_ddp/single_and_dp.cpp: the two modes that run in the benchmark's own process --
// `single` (the baseline every other mode is judged by) and `dp` (DataParallel: one process drives
// every device, parallel/data_parallel.h).
#include <ringgrad/ringgrad.h>

#include <chrono>

#include "modes.h"
#include "peak_memory.h"

namespace bench {

using namespace ringgrad;
using Clock = std::chrono::steady_clock;

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Medians of each key over the timed steps.
std::map<std::string, double> medians(const std::map<std::string, std::vector<double>>& per_step) {
  std::map<std::string, double> out;
  for (const auto& [key, values] : per_step) out[key] = stats_of(values).median;
  return out;
}

bool traced_step(const Options& o, int s) { return s >= o.warmup + o.steps - o.trace_steps; }

template <typename Model>
ModeResult single_with(const Options& o, const Data& global, std::vector<double>& final_params, Trace* trace) {
  const Device device = o.device_at(0);
  const Data data = shard(global, 0, 1, device);
  reset_peak_memory(device);
  auto model = make_model<Model>(o, device);
  nn::optim::SGD opt(model->parameters(), nn::optim::SGDOptions(o.lr).momentum(0.9));
  ModeResult r;
  r.mode = r.id = "single";
  r.devices = 1;
  std::map<std::string, std::vector<double>> parts;
  if (trace) {
    trace->name_process(0, "single: " + device.str());
    trace->name_thread(0, 0, "main thread (forward, optimizer) and backward");
  }
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    const size_t k = static_cast<size_t>(s) % data.x.size();
    const auto t0 = Clock::now();
    opt.zero_grad();
    const Tensor loss = loss_of(model->forward(data.x[k]), data.y[k]);
    sync(device);
    const auto t1 = Clock::now();
    loss.backward();
    sync(device);
    const auto t2 = Clock::now();
    opt.step();
    loss.item();
    const auto t3 = Clock::now();
    if (s < o.warmup) continue;
    r.step_ms.push_back(ms_between(t0, t3));
    parts["forward"].push_back(ms_between(t0, t1));
    parts["backward"].push_back(ms_between(t1, t2));
    parts["optimizer"].push_back(ms_between(t2, t3));
    if (trace && traced_step(o, s)) {
      trace->slice(0, 0, "forward", t0, t1, {{"step", s}});
      trace->slice(0, 0, "backward", t1, t2, {{"step", s}});
      trace->slice(0, 0, "optimizer", t2, t3, {{"step", s}});
    }
  }
  r.breakdown_ms = medians(parts);
  r.peak_memory_mb = {peak_memory_mb(device)};
  final_params = flat_parameters(model->parameters());
  r.max_abs_diff = 0;
  return r;
}

template <typename Model>
ModeResult dp_with(const Options& o, const Data& global, std::vector<double>& final_params, Trace* trace) {
  const int available = o.device == "cuda" ? cuda_device_count() : cpu_device_count();
  const int n = std::min(o.devices, available);
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(o.device_at(i));
  const Data data = shard(global, 0, 1, devices[0]);  // the batch starts on device 0, as in PyTorch
  for (Device d : devices) reset_peak_memory(d);
  auto model = make_model<Model>(o, devices[0]);
  parallel::DataParallel<Model> dp(model, devices);
  nn::optim::SGD opt(dp.parameters(), nn::optim::SGDOptions(o.lr).momentum(0.9));
  ModeResult r;
  r.mode = r.id = "dp";
  r.devices = n;
  if (n < o.devices) r.note = "only " + std::to_string(n) + " devices";
  std::map<std::string, std::vector<double>> parts;
  if (trace) {
    trace->name_process(0, "DP process: main thread");
    trace->name_thread(0, 0, "main thread");
    for (int i = 0; i < n; ++i) {
      trace->name_process(1 + i, "DP " + devices[i].str());
      trace->name_thread(1 + i, 0, devices[i].str() + " worker");
    }
  }
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    const size_t k = static_cast<size_t>(s) % data.x.size();
    const auto t0 = Clock::now();
    opt.zero_grad();
    const Tensor loss = loss_of(dp(data.x[k]), data.y[k]);
    sync(devices[0]);
    const auto t1 = Clock::now();
    loss.backward();
    for (Device d : devices) sync(d);
    const auto t2 = Clock::now();
    opt.step();
    loss.item();
    const auto t3 = Clock::now();
    if (s < o.warmup) continue;
    const parallel::DataParallelTimings t = dp.timings();
    r.step_ms.push_back(ms_between(t0, t3));
    parts["scatter"].push_back(t.scatter_us / 1e3);
    parts["replicate"].push_back(t.replicate_us / 1e3);
    parts["apply"].push_back(t.apply_us / 1e3);
    parts["gather"].push_back(t.gather_us / 1e3);
    parts["backward"].push_back(ms_between(t1, t2));
    parts["reduce"].push_back(t.reduce_us / 1e3);
    parts["optimizer"].push_back(ms_between(t2, t3));
    if (trace && traced_step(o, s)) {
      // The main thread's phases run one after another; timings() gives their durations, laid
      // end to end from the step's start (scatter, replicate, then the replicas, then gather).
      auto at = [&](double us) {
        return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::micro>(us));
      };
      trace->slice(0, 0, "scatter", at(0), at(t.scatter_us), {{"step", s}});
      trace->slice(0, 0, "replicate", at(t.scatter_us), at(t.scatter_us + t.replicate_us), {{"step", s}});
      Clock::time_point apply_end = t0;
      for (size_t i = 0; i < t.forward.size(); ++i) {
        trace->slice(1 + static_cast<int>(i), 0, "forward (replica " + std::to_string(i) + ")", t.forward[i].start,
                     t.forward[i].end, {{"step", s}});
        apply_end = std::max(apply_end, t.forward[i].end);
      }
      trace->slice(0, 0, "gather + loss", apply_end, t1, {{"step", s}});
      for (const DeviceActivity& a : t.backward) {
        int pid = 0;
        for (int i = 0; i < n; ++i) pid = devices[i] == a.device ? 1 + i : pid;
        trace->slice(
            pid, 0, "backward", a.first_start, a.last_end,
            {{"step", s}, {"busy_ms", std::chrono::duration<double, std::milli>(a.busy).count()}, {"nodes", a.nodes}});
      }
      trace->slice(0, 0, "optimizer", t2, t3, {{"step", s}});
    }
  }
  r.breakdown_ms = medians(parts);
  for (Device d : devices) r.peak_memory_mb.push_back(peak_memory_mb(d));
  final_params = flat_parameters(model->parameters());
  return r;
}

}  // namespace

ModeResult run_single(const Options& o, const Data& data, std::vector<double>& final_params, Trace* trace) {
  return with_model(
      o, [&](auto type) { return single_with<typename decltype(type)::type>(o, data, final_params, trace); });
}

ModeResult run_dp(const Options& o, const Data& data, std::vector<double>& final_params, Trace* trace) {
  return with_model(o, [&](auto type) { return dp_with<typename decltype(type)::type>(o, data, final_params, trace); });
}

Link measure_copy_link(const Options& o, int64_t large_bytes) {
  const int available = o.device == "cuda" ? cuda_device_count() : cpu_device_count();
  if (available < 2) return {"copy (not measured: one device)", NAN, NAN};
  const Device from = o.device_at(0), to = o.device_at(1);
  auto time_copy_us = [&](int64_t bytes) {
    const Tensor src = zeros({std::max<int64_t>(1, bytes / 4)}, TensorOptions(DType::f32).device(from));
    std::vector<double> us;
    for (int rep = 0; rep < 25; ++rep) {
      const auto start = Clock::now();
      const Tensor dst = src.to(to);
      sync(to);
      if (rep >= 5) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
    return stats_of(us).median;
  };
  const double small = 4096;
  const int64_t large = std::max<int64_t>(large_bytes, int64_t{4} << 20);  // bandwidth-bound: MBs
  return fit_copy("measured copy " + from.str() + " -> " + to.str(), small, time_copy_us(static_cast<int64_t>(small)),
                  static_cast<double>(large), time_copy_us(large));
}

}  // namespace bench
