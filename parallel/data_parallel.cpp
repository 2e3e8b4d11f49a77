// parallel/data_parallel.cpp: DataParallel's forward, its checks, and its timers.
#include <ringgrad/parallel/data_parallel.h>

#include <cstddef>
#include <mutex>
#include <set>

namespace ringgrad {
namespace detail {

using namespace parallel;  // the module-independent half of a parallel:: wrapper, in parallel's terms
namespace {

using Clock = std::chrono::steady_clock;

double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

}  // namespace

struct DataParallelCore::Recorder {
  std::mutex mutex;
  DataParallelTimings timings;
  Clock::time_point backward_start;
};

DataParallelCore::DataParallelCore(std::vector<Device> devices, const DataParallelOptions& options)
    : devices_(std::move(devices)),
      dim_(options.dim()),
      reduce_clock_(std::make_shared<ReduceClock>()),
      recorder_(std::make_shared<Recorder>()) {
  RINGGRAD_CHECK(!devices_.empty(), "DataParallel: expected at least one device, got an empty list");
  std::set<Device> seen;
  for (Device d : devices_) {
    RINGGRAD_CHECK(d.kind == devices_[0].kind, "DataParallel: expected devices of one kind, got ", devices_[0], " and ",
                   d);
    RINGGRAD_CHECK(seen.insert(d).second, "DataParallel: expected distinct devices, got ", d, " twice");
    check_device(d, "DataParallel");
  }
  output_device_ = options.output_device().value_or(devices_[0]);
  check_device(output_device_, "DataParallel");
}

void DataParallelCore::check_module(const nn::Module& module) const {
  // The replicas are broadcast from the first device, and the optimizer updates the module there.
  for (const auto& named : {module.named_parameters(), module.named_buffers()})
    for (const auto& [name, t] : named)
      RINGGRAD_CHECK(t.device() == devices_[0], "DataParallel: expected the module on ", devices_[0],
                     " (the first device), got '", name, "' on ", t.device(), "; call module->to(", devices_[0],
                     ") before wrapping it");
}

void DataParallelCore::prepare_replicas(nn::Module& module, size_t n) {
  if (replicas_.empty()) {
    replicas_ = replicate(module, devices_, reduce_clock_);  // clones the module objects, once
    return;
  }
  const auto count = static_cast<std::ptrdiff_t>(n);  // n <= devices_.size()
  const std::vector<std::shared_ptr<nn::Module>> used(replicas_.begin(), replicas_.begin() + count);
  const std::vector<Device> on(devices_.begin(), devices_.begin() + count);
  refresh_replicas(module, used, on, reduce_clock_);  // fresh copies of this step's parameter values
}

// The backward phases are measured from inside loss.backward(): a hook on gather's output marks the
// start of DataParallel's part of backward, and a callback queued from it runs once the whole pass
// has finished -- it reads the end time, each device's activity, and the Broadcast nodes' total.
void DataParallelCore::time_backward(const Tensor& output) {
  if (!output.requires_grad() || output.output_nr() != 0) return;
  std::shared_ptr<Recorder> recorder = recorder_;
  std::shared_ptr<ReduceClock> clock = reduce_clock_;
  output.register_hook([recorder, clock](const Tensor&) {
    {
      std::lock_guard<std::mutex> lock(recorder->mutex);
      recorder->backward_start = Clock::now();
    }
    queue_callback([recorder, clock] {
      std::vector<DeviceActivity> activity = current_backward_activity();
      std::lock_guard<std::mutex> lock(recorder->mutex);
      recorder->timings.backward_us = us_between(recorder->backward_start, Clock::now());
      recorder->timings.backward = std::move(activity);
      recorder->timings.reduce_us = std::chrono::duration<double, std::micro>(clock->take()).count();
    });
    return Tensor();
  });
}

Tensor DataParallelCore::forward(
    nn::Module& module, const Tensor& x,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&, std::vector<Interval>*)>& apply) {
  RINGGRAD_CHECK(x.defined(), "DataParallel: expected a defined input, got an undefined tensor");
  check_module(module);
  reduce_clock_->take();  // a forward that never saw a backward leaves nothing behind
  DataParallelTimings t;
  {
    std::lock_guard<std::mutex> lock(recorder_->mutex);
    t.step = recorder_->timings.step + 1;
  }
  Tensor out;
  const auto start = Clock::now();
  if (devices_.size() == 1) {
    // One device: nothing to split or copy, just the module (on that device).
    out = module.forward(x.to(devices_[0]));
    if (output_device_ != devices_[0]) out = out.to(output_device_);
    t.apply_us = us_between(start, Clock::now());
    t.devices_used = 1;
  } else {
    const std::vector<Tensor> chunks = scatter(x, devices_, dim_);
    const auto scattered = Clock::now();
    prepare_replicas(module, chunks.size());
    const auto replicated = Clock::now();
    const std::vector<Tensor> outputs = apply(chunks, &t.forward);
    const auto applied = Clock::now();
    out = gather(outputs, output_device_, dim_);
    const auto gathered = Clock::now();
    t.scatter_us = us_between(start, scattered);
    t.replicate_us = us_between(scattered, replicated);
    t.apply_us = us_between(replicated, applied);
    t.gather_us = us_between(applied, gathered);
    t.devices_used = static_cast<int64_t>(chunks.size());
  }
  time_backward(out);
  std::lock_guard<std::mutex> lock(recorder_->mutex);
  recorder_->timings = std::move(t);
  return out;
}

DataParallelTimings DataParallelCore::timings() const {
  std::lock_guard<std::mutex> lock(recorder_->mutex);
  return recorder_->timings;
}

}  // namespace detail
}  // namespace ringgrad
