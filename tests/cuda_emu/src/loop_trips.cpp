// tests/cuda_emu/src/loop_trips.cpp: the counts behind RINGGRAD_EMU_LOOP_REPORT (loop_trips.h).
#include "loop_trips.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <tuple>

#include "cuda_emu/device.h"

namespace cuda_emu {

thread_local ThreadTrips* current_thread_trips = nullptr;
thread_local LaunchTrips* current_launch_trips = nullptr;

namespace {

struct Count {
  uint64_t launches = 0, repeated = 0;
};

std::mutex g_counts_mutex;
// By loop site and kernel name. Never destroyed: written by an atexit handler.
auto& g_counts = *new std::map<std::tuple<std::string, int, std::string>, Count>();

const char* report_path() {
  static const char* path = [] {
    const char* env = std::getenv("RINGGRAD_EMU_LOOP_REPORT");
    return env != nullptr && *env != '\0' ? env : nullptr;
  }();
  return path;
}

// Appends this process's counts to the report, under a lock: DDP workers write to it too.
void write_report() {
  std::string text;
  {
    std::lock_guard<std::mutex> lock(g_counts_mutex);
    for (const auto& [key, count] : g_counts)
      text += std::get<0>(key) + ":" + std::to_string(std::get<1>(key)) + "\t" + std::get<2>(key) + "\t" +
              std::to_string(count.launches) + "\t" + std::to_string(count.repeated) + "\n";
  }
  if (text.empty()) return;
  const int fd = ::open(report_path(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;  // at exit there is no one left to tell; the report's reader finds lines missing
  ::flock(fd, LOCK_EX);
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace

bool loop_report_enabled() { return report_path() != nullptr; }

void add_launch_trips(const char* kernel, const LaunchTrips& trips) {
  if (trips.repeated.empty()) return;
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(write_report); });
  std::lock_guard<std::mutex> lock(g_counts_mutex);
  for (const auto& [site, repeated] : trips.repeated) {
    Count& c = g_counts[{site.first, site.second, kernel}];
    ++c.launches;
    c.repeated += repeated ? 1 : 0;
  }
}

void count_trip(const char* file, int line, long long value, long long step) {
  ThreadTrips* const thread = current_thread_trips;
  LaunchTrips* const launch = current_launch_trips;
  if (thread == nullptr || launch == nullptr) return;  // no report asked for
  const LoopSite site{file, line};
  ThreadTrips::Pass* pass = nullptr;
  for (ThreadTrips::Pass& p : thread->passes)
    if (p.site == site) pass = &p;
  if (pass == nullptr) {
    thread->passes.push_back(ThreadTrips::Pass{site, value, 0});
    pass = &thread->passes.back();
    launch->repeated.emplace(site, false);
  }
  pass->trips = value == pass->next ? pass->trips + 1 : 1;
  if (pass->trips == 2) launch->repeated[site] = true;
  pass->next = value + step;
}

}  // namespace cuda_emu
