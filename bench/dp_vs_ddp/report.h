// bench/dp_vs_ddp/report.h: everything one run of dp_vs_ddp collected, and its presentation -- the
// table on stdout (the format of bench_util.h's Table), the scaling model's tables, --json and --csv.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mode_result.h"
#include "scaling_model.h"
#include "workload.h"

namespace bench {

struct Run {
  Options options;
  std::vector<ModeResult> modes;  // single first
  std::vector<int64_t> param_bytes;
  nlohmann::json allreduce;  // the ranks' all-reduce timing (for the model), or null
  Link copy_link;            // DP's measured device-to-device copy (for the model)
  nlohmann::json micro;      // Google Benchmark's JSON of bench_micro, or null
  std::vector<std::string> traces;
  std::vector<std::string> notes;  // '#' lines printed under the table
};

// Prints the tables and writes the files asked for; returns 0 when every ringgrad mode is correct.
int report(const Run& run);

}  // namespace bench
