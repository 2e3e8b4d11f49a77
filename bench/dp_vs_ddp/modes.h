// bench/dp_vs_ddp/modes.h: the modes dp_vs_ddp runs. single and dp run inside the benchmark's own
// process (single_and_dp.cpp); the DDP variants run in N processes it starts (ddp_ranks.cpp).
#pragma once

#include <string>
#include <vector>

#include "mode_result.h"
#include "scaling_model.h"
#include "trace.h"
#include "workload.h"

namespace bench {

// One device, the whole global batch. Fills `final_params` (every parameter, flattened).
ModeResult run_single(const Options& o, const Data& data, std::vector<double>& final_params, Trace* trace);

// DataParallel over o.devices devices (fewer when there are fewer GPUs; the note says so).
ModeResult run_dp(const Options& o, const Data& data, std::vector<double>& final_params, Trace* trace);

// Times copies between device 0 and device 1 (small and `large_bytes`) and fits alpha and beta:
// the link DP's copies use, for the scaling model.
Link measure_copy_link(const Options& o, int64_t large_bytes);

// The body of one DDP rank (RANK etc. in the environment): runs every DDP variant, and rank 0
// writes the results as JSON lines to $BENCH_RESULT_FILE (final parameters and trace events to
// files beside it, named by result_side_file()).
int run_ddp_rank(const Options& o);

// Where a rank leaves bulky results for the parent: "<result file>.<what>".
std::string result_side_file(const std::string& result_file, const std::string& what);

}  // namespace bench
