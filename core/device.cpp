// core/device.cpp: the logical CPU device count, and one worker thread per device.
#include <ringgrad/core/device.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <ringgrad/core/base/error.h>
#include <ringgrad/core/cuda.h>
#include <ringgrad/kernels/backend.h>

namespace ringgrad {

namespace {

// The count is latched the first time anything asks for it, so every part of the program agrees.
std::mutex g_count_mutex;
int g_cpu_count = 0;  // 0: not decided yet

int read_env_count() {
  const char* env = std::getenv("RINGGRAD_CPU_DEVICES");
  if (!env || !*env) return 1;
  char* end = nullptr;
  const long k = std::strtol(env, &end, 10);
  RINGGRAD_CHECK(*end == '\0' && k >= 1 && k <= 1024, "RINGGRAD_CPU_DEVICES: expected an integer in [1, 1024], got '",
                 env, "'");
  return static_cast<int>(k);
}

// One thread, one FIFO queue. Tasks run in submission order, so work posted to a device from one
// thread keeps its order, like work on a CUDA stream.
class DeviceWorker {
 public:
  explicit DeviceWorker(Device device) : device_(device), thread_([this] { loop(); }) {}
  ~DeviceWorker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  void post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(task));
    }
    wake_.notify_one();
  }
  std::thread::id thread_id() const { return thread_.get_id(); }

 private:
  void loop();

  Device device_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

thread_local Device t_worker_device{DeviceKind::CPU, -1};

void DeviceWorker::loop() {
  t_worker_device = device_;
  if (device_.is_cpu()) {
    // The cores are shared by the logical CPU devices: give each worker its share.
    const auto cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));  // a core count fits
    kernels::backend_for(DeviceKind::CPU).set_thread_count(std::max(1, cores / cpu_device_count()));
  }
  // A GPU's worker makes its device current once, for good: its tasks' runtime calls then never
  // create a context on another GPU (a thread with none would get one on cuda:0).
  std::unique_ptr<CudaDeviceGuard> own_device;
  if (device_.is_cuda()) own_device = std::make_unique<CudaDeviceGuard>(device_.index);
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // tasks catch their own exceptions (run_on wraps them in a packaged_task)
  }
}

std::mutex g_workers_mutex;
std::map<Device, std::unique_ptr<DeviceWorker>>& workers() {
  static auto* map = new std::map<Device, std::unique_ptr<DeviceWorker>>();  // see note below
  return *map;
}
// Note: the worker map is deliberately never destroyed. Joining threads from a static destructor
// races with other statics being torn down; the OS reclaims idle workers at exit.

DeviceWorker& worker_for(Device device) {
  check_device(device, "run_on");
  std::lock_guard<std::mutex> lock(g_workers_mutex);
  auto& slot = workers()[device];
  if (!slot) slot = std::make_unique<DeviceWorker>(device);
  return *slot;
}

}  // namespace

int cpu_device_count() {
  std::lock_guard<std::mutex> lock(g_count_mutex);
  if (g_cpu_count == 0) g_cpu_count = read_env_count();
  return g_cpu_count;
}

void set_cpu_device_count(int count) {
  RINGGRAD_CHECK(count >= 1 && count <= 1024, "set_cpu_device_count: expected a count in [1, 1024], got ", count);
  std::lock_guard<std::mutex> lock(g_count_mutex);
  RINGGRAD_CHECK(g_cpu_count == 0 || g_cpu_count == count, "set_cpu_device_count: the count is already fixed at ",
                 g_cpu_count, " (devices were used); call it before creating any tensor, or set RINGGRAD_CPU_DEVICES");
  g_cpu_count = count;
}

void set_num_threads(int threads) {
  RINGGRAD_CHECK(threads >= 1, "set_num_threads: expected at least 1 thread, got ", threads);
  kernels::backend_for(DeviceKind::CPU).set_thread_count(threads);
}

void check_device(Device device, const char* op) {
  if (device.is_cpu()) {
    const int k = cpu_device_count();
    RINGGRAD_CHECK(device.index >= 0 && device.index < k, op, ": expected a device in cpu:0..cpu:", k - 1,
                   " (RINGGRAD_CPU_DEVICES=", k, "), got ", device);
  } else {
    kernels::backend_for(DeviceKind::CUDA, op);  // throws with a clear message when there is no CUDA backend or GPU
    const int n = cuda_device_count();
    RINGGRAD_CHECK(device.index >= 0 && device.index < n, op, ": expected a device in cuda:0..cuda:", n - 1, " (", n,
                   n == 1 ? " GPU" : " GPUs", " visible), got ", device);
  }
}

std::future<void> run_on(Device device, std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  std::future<void> done = packaged.get_future();
  if (current_worker_device() == device) {
    packaged();  // already on that worker: queueing would deadlock a caller that waits
    return done;
  }
  auto shared = std::make_shared<std::packaged_task<void()>>(std::move(packaged));
  worker_for(device).post([shared] { (*shared)(); });
  return done;
}

void post_to(Device device, std::function<void()> task) { worker_for(device).post(std::move(task)); }

Device current_worker_device() { return t_worker_device; }

}  // namespace ringgrad
