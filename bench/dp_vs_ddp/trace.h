// bench/dp_vs_ddp/trace.h: Chrome trace events, so the overlap of communication with backward can
// be *seen* (open the file in https://ui.perfetto.dev or chrome://tracing).
//
// The format: {"traceEvents": [...]}, each event {"name", "ph", "pid", "tid", "ts", "dur"} with times
// in microseconds. "ph": "X" is a slice (start + duration), "i" an instant, "M" metadata naming a
// process (pid: one per device or rank) or a thread (tid: one track per compute or comm thread).
// Times are steady_clock (CLOCK_MONOTONIC on Linux), which every process on the machine shares, so
// the ranks' events line up on one time axis without any clock synchronisation.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bench {

class Trace {
 public:
  using Time = std::chrono::steady_clock::time_point;

  void name_process(int pid, const std::string& name) {
    events_.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}});
  }
  void name_thread(int pid, int tid, const std::string& name) {
    events_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
  }
  void slice(int pid, int tid, const std::string& name, Time start, Time end, nlohmann::json args = nullptr) {
    nlohmann::json e = {{"name", name}, {"ph", "X"},       {"pid", pid},
                        {"tid", tid},   {"ts", us(start)}, {"dur", std::max(0.0, us(end) - us(start))}};
    if (!args.is_null()) e["args"] = std::move(args);
    events_.push_back(std::move(e));
  }
  void instant(int pid, int tid, const std::string& name, Time at) {
    events_.push_back({{"name", name}, {"ph", "i"}, {"s", "t"}, {"pid", pid}, {"tid", tid}, {"ts", us(at)}});
  }

  const nlohmann::json& events() const { return events_; }
  void append(const nlohmann::json& events) {
    for (const auto& e : events) events_.push_back(e);
  }
  nlohmann::json document() const { return {{"traceEvents", events_}, {"displayTimeUnit", "ms"}}; }

 private:
  static double us(Time t) { return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count(); }
  nlohmann::json events_ = nlohmann::json::array();
};

}  // namespace bench
