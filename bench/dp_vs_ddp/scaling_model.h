// bench/dp_vs_ddp/scaling_model.h: an alpha-beta cost MODEL of DP and DDP step time -- arithmetic,
// not a measurement. It is calibrated from what this run measured, checked against the measured
// step times at the run's N, and then extrapolated to 2 ... 1024 devices over other links.
//
// Cost of moving S bytes over a link: alpha + S / beta (alpha: latency per message, beta: bandwidth).
//
// DDP (one process per device, ring all-reduce of each gradient bucket):
//   all-reduce of S bytes on N ranks = 2(N-1) * alpha + 2(N-1)/N * S / beta
//     (N-1 reduce-scatter steps and N-1 all-gather steps, each sending S/N bytes per rank).
//   Backward produces gradients at a rate proportional to their bytes (true for an MLP: each layer's
//   backward GEMMs cost in proportion to its weights), so bucket i is ready at
//   backward * (bytes of buckets 0..i) / (all bytes). One link: bucket i's all-reduce starts at
//   max(its ready time, the end of bucket i-1's) -- or, without overlap, after backward. The
//   exposed communication is what ends after backward:
//     step = forward + backward + max(0, end of last all-reduce - backward) + optimizer.
//   On CPU devices (a link that shares_compute_cores) two more costs are CPU work on the cores that
//   compute, so overlap cannot hide them: the all-reduce itself (the ring's sums and copies run on
//   the communication thread) -- the model adds all of it, not just the exposed part -- and the
//   copies of every gradient into its bucket and of the average back (2P bytes at the measured copy
//   bandwidth). On a GPU those copies run in device memory at TB/s and are left out.
//
// DP (one process drives every device; all copies go through device 0's link, one after another):
//     step = scatter + replicate + forward/N + gather + backward/N + reduce + optimizer, with
//     replicate = reduce = (N-1)(alpha + P/beta) for P parameter bytes, and scatter/gather moving
//     (N-1)/N of the batch's inputs/outputs.
// Compute is scaled linearly with the per-device batch, from the single-device measurement.
//
// What it leaves out, on purpose: compute and communication competing for cores or memory
// bandwidth (they do on a 2-core CPU), the copy of averaged gradients back into .grad, kernel
// launch overheads, and network topology (every preset is one flat ring of identical links).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace bench {

struct Link {
  std::string name;
  double alpha_us = NAN;              // per message
  double beta_GBps = NAN;             // per direction, per device
  bool shares_compute_cores = false;  // the transfer is CPU work on the cores that also compute
};

// Nominal figures of common links (per direction); "measured" links come from this run.
inline std::vector<Link> link_presets() {
  return {{"NVLink 4 (H100/H200 SXM)", 3, 450},
          {"PCIe 5 x16", 5, 50},
          {"400 Gb InfiniBand NDR", 5, 50},
          {"100 Gb Ethernet", 15, 12.5}};
}

// A fit that can be used: positive, finite bandwidth and a latency that is not negative.
inline bool usable(const Link& l) {
  return std::isfinite(l.beta_GBps) && l.beta_GBps > 0 && std::isfinite(l.alpha_us) && l.alpha_us >= 0;
}

// Fits alpha and beta of the all-reduce formula to two measured all-reduce times on `n` >= 2 ranks
// (the large size should be MBs, so bandwidth dominates; a fit that makes no sense is !usable()).
inline Link fit_allreduce(const std::string& name, int n, double small_bytes, double small_us, double large_bytes,
                          double large_us) {
  if (n < 2 || large_us <= small_us || large_bytes <= small_bytes) return {name, NAN, NAN};
  const double f = 2.0 * (n - 1) / n;  // the bytes factor of the ring
  const double beta = f * (large_bytes - small_bytes) / std::max(1e-9, large_us - small_us) / 1e3;  // GB/s
  const double alpha = std::max(0.0, (small_us - f * small_bytes / (beta * 1e3)) / (2.0 * (n - 1)));
  return {name, alpha, beta};
}

// Fits alpha and beta of one copy (alpha + S / beta) to two measured copy times.
inline Link fit_copy(const std::string& name, double small_bytes, double small_us, double large_bytes,
                     double large_us) {
  if (large_us <= small_us || large_bytes <= small_bytes) return {name, NAN, NAN};
  const double beta = (large_bytes - small_bytes) / std::max(1e-9, large_us - small_us) / 1e3;
  return {name, std::max(0.0, small_us - small_bytes / (beta * 1e3)), beta};
}

// What the model is calibrated with (all measured in this run).
struct Calibration {
  int64_t measured_batch = 0;              // the global batch `single` ran
  double forward_ms = 0, backward_ms = 0;  // single's compute at measured_batch
  double optimizer_ms = 0;                 // single's optimizer step (+ loss.item())
  std::vector<int64_t> param_bytes;        // per parameter, in registration order
  int64_t input_bytes_per_sample = 0, output_bytes_per_sample = 0;
  Link ring;  // fitted all-reduce (alpha per step, beta)
  Link copy;  // fitted device-to-device copy: DP's copies, and DDP's copies into and out of buckets
};

// How DDP cuts the parameters into buckets: the Reducer's rule (reverse registration order, the
// first bucket first_cap_mb, the others cap_mb; cap 0 = one bucket per parameter).
inline std::vector<int64_t> bucket_bytes(const std::vector<int64_t>& param_bytes, double cap_mb, double first_cap_mb) {
  std::vector<int64_t> buckets;
  int64_t open = 0;
  bool any = false;
  for (auto it = param_bytes.rbegin(); it != param_bytes.rend(); ++it) {
    open += *it;
    any = true;
    const double cap = cap_mb == 0 ? 0 : buckets.empty() ? first_cap_mb : cap_mb;
    if (static_cast<double>(open) >= cap * 1024 * 1024) {
      buckets.push_back(open);
      open = 0;
      any = false;
    }
  }
  if (any) buckets.push_back(open);
  return buckets;
}

struct DdpShape {
  double cap_mb = 25, first_cap_mb = 1;
  bool overlap = true;
};

inline double allreduce_us(const Link& link, int n, double bytes) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * link.alpha_us + 2.0 * (n - 1) / n * bytes / (link.beta_GBps * 1e3);
}

inline double copy_us(const Link& link, double bytes) { return link.alpha_us + bytes / (link.beta_GBps * 1e3); }

struct Prediction {
  double step_ms = 0, compute_ms = 0, comm_ms = 0, exposed_ms = 0;
};

// DDP on n ranks, each with `per_device_batch` samples.
inline Prediction predict_ddp(const Calibration& c, const Link& link, int n, int64_t per_device_batch,
                              const DdpShape& shape) {
  const double scale = static_cast<double>(per_device_batch) / static_cast<double>(c.measured_batch);
  const double fwd = c.forward_ms * scale, bwd = c.backward_ms * scale;
  const std::vector<int64_t> buckets = bucket_bytes(c.param_bytes, shape.cap_mb, shape.first_cap_mb);
  double total = 0;
  for (int64_t b : buckets) total += static_cast<double>(b);
  double produced = 0, link_free = 0, comm = 0;
  for (int64_t b : buckets) {
    produced += static_cast<double>(b);
    const double ready = shape.overlap ? bwd * produced / total : bwd;
    const double cost = allreduce_us(link, n, static_cast<double>(b)) / 1e3;
    link_free = std::max(ready, link_free) + cost;
    comm += cost;
  }
  double params = 0;
  for (int64_t b : c.param_bytes) params += static_cast<double>(b);
  Prediction p;
  p.compute_ms = fwd + bwd;
  p.comm_ms = comm;
  p.exposed_ms = link.shares_compute_cores ? comm : std::max(0.0, link_free - bwd);
  const double bucket_copies = link.shares_compute_cores ? 2 * copy_us(c.copy, params) / 1e3 : 0;
  p.step_ms = fwd + bwd + p.exposed_ms + bucket_copies + c.optimizer_ms;
  return p;
}

// DP on n devices with a global batch of `global_batch`.
inline Prediction predict_dp(const Calibration& c, const Link& link, int n, int64_t global_batch) {
  const double per_device = static_cast<double>(global_batch) / n;
  const double scale = per_device / static_cast<double>(c.measured_batch);
  double params = 0;
  for (int64_t b : c.param_bytes) params += static_cast<double>(b);
  const double others = n - 1;
  const double replicate = others * copy_us(link, params) / 1e3, reduce = replicate;
  const double scatter = others * copy_us(link, per_device * c.input_bytes_per_sample) / 1e3;
  const double gather = others * copy_us(link, per_device * c.output_bytes_per_sample) / 1e3;
  Prediction p;
  p.compute_ms = (c.forward_ms + c.backward_ms) * scale;
  p.comm_ms = replicate + reduce + scatter + gather;
  p.exposed_ms = p.comm_ms;  // DP overlaps none of its copies
  p.step_ms = p.compute_ms + p.comm_ms + c.optimizer_ms;
  return p;
}

}  // namespace bench
