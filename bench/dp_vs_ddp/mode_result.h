// bench/dp_vs_ddp/mode_result.h: what one mode measured, as rows of the table and of the JSON.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workload.h"

namespace bench {

struct ModeResult {
  std::string mode;                 // single, dp, ddp-naive, ..., torch-ddp
  std::string id;                   // unique per row: mode, or "ddp-bucketed-25MB"
  std::string source = "ringgrad";  // or "pytorch"
  int devices = 1;
  double cap_mb = NAN;            // ddp-bucketed's bucket_cap_mb
  double first_cap_mb = NAN;      // and its first_bucket_cap_mb
  std::vector<double> bucket_mb;  // DDP: the buckets of the last timed step, in launch order (MB)
  std::vector<double> step_ms;    // one per timed step; DDP: the slowest rank's
  // Medians over the timed steps (DDP: averaged over ranks). Keys by family:
  //   single: forward, backward, optimizer
  //   dp:     scatter, replicate, apply, gather, backward, reduce (inside backward), optimizer
  //   ddp:    forward, backward, comm (overlaps backward), exposed_comm, copy_back, optimizer
  std::map<std::string, double> breakdown_ms;
  std::vector<double> peak_memory_mb;  // per device (DDP: per rank)
  double max_abs_diff = NAN;           // final parameters against single's
  bool replicas_identical = true;      // DDP: every rank ends with bitwise the same parameters
  bool checked = true;                 // false: the mode is not meant to match single (ddp-no_sync)
  std::string note;                    // why a value is missing, or how it was measured

  Stats step() const { return stats_of(step_ms); }
  double breakdown(const std::string& key) const {
    auto it = breakdown_ms.find(key);
    return it == breakdown_ms.end() ? NAN : it->second;
  }
  double overlap_pct() const {
    const double comm = breakdown("comm"), exposed = breakdown("exposed_comm");
    return comm > 0 ? 100.0 * std::clamp(1.0 - exposed / comm, 0.0, 1.0) : NAN;
  }
};

inline nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

// Carries a result from a rank to the parent (one JSON line each) -- everything but derived values.
inline nlohmann::json to_wire(const ModeResult& r) {
  return {{"mode", r.mode},
          {"id", r.id},
          {"source", r.source},
          {"devices", r.devices},
          {"cap_mb", number_or_null(r.cap_mb)},
          {"first_cap_mb", number_or_null(r.first_cap_mb)},
          {"bucket_mb", r.bucket_mb},
          {"step_ms", r.step_ms},
          {"breakdown_ms", r.breakdown_ms},
          {"peak_memory_mb", r.peak_memory_mb},
          {"replicas_identical", r.replicas_identical},
          {"checked", r.checked},
          {"note", r.note}};
}

inline ModeResult from_wire(const nlohmann::json& j) {
  ModeResult r;
  r.mode = j.at("mode");
  r.id = j.value("id", r.mode);
  r.source = j.value("source", "ringgrad");
  r.devices = j.value("devices", 1);
  r.cap_mb = j.contains("cap_mb") && j["cap_mb"].is_number() ? j["cap_mb"].get<double>() : NAN;
  r.first_cap_mb = j.contains("first_cap_mb") && j["first_cap_mb"].is_number() ? j["first_cap_mb"].get<double>() : NAN;
  if (j.contains("bucket_mb")) r.bucket_mb = j["bucket_mb"].get<std::vector<double>>();
  r.step_ms = j.at("step_ms").get<std::vector<double>>();
  if (j.contains("breakdown_ms") && j["breakdown_ms"].is_object())
    r.breakdown_ms = j["breakdown_ms"].get<std::map<std::string, double>>();
  if (j.contains("peak_memory_mb")) r.peak_memory_mb = j["peak_memory_mb"].get<std::vector<double>>();
  r.replicas_identical = j.value("replicas_identical", true);
  r.checked = j.value("checked", true);
  r.note = j.value("note", "");
  return r;
}

}  // namespace bench
