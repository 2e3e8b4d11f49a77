// bench/dp_vs_ddp/workload.h: what every mode of dp_vs_ddp shares -- the options, the model, the
// data, the modes themselves, and the statistics of a list of step times.
//
// Two models (--model):
//   mlp  nn::MLP: few, large parameter tensors (6 for 784-1024-1024-10). Its gradients are ready in
//        two or three lumps, so every bucket size gives about the same step.
//   gpt  examples/gpt's GPT-2-style decoder: 4 + 12 x layers tensors of very different sizes (a
//        LayerNorm's 1 KB beside an MLP weight's MBs), ready one block at a time from the last block
//        to the first: the workload where bucket size, gradient order and overlap matter.
//
// Fairness rules, so the modes differ only in how they parallelise:
//   * the same model (initialised from manual_seed(0)), the same global batch of the same data,
//     the same optimizer (SGD, momentum 0.9) and the same number of steps in every mode;
//   * a "device" is a GPU, or on the CPU one logical device with its share of the cores
//     (cores / devices threads): `single` uses one share, DP and DDP use `devices` shares;
//   * warm-up steps are never timed; each timed step ends with loss.item(), which waits for the GPU.
#pragma once

#include <ringgrad/ringgrad.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "examples/gpt/model.h"

namespace bench {

struct Options {
  std::string device = "cpu";  // "cpu": logical CPU devices; "cuda": GPUs
  // The DDP ranks' process group: "auto" (nccl with a GPU per rank in a build with NCCL, else ring),
  // "ring", "gloo" (CPU only) or "nccl".
  std::string backend = "auto";
  // Every DDP variant's communication hook (parallel/comm_hook.h): "none" (one all-reduce per
  // bucket), "bf16" or "fp16" (buckets sent as bfloat16 or float16: half the bytes).
  std::string comm_hook = "none";
  int devices = 2;  // N, for dp and ddp
  // The DDP ranks' hosts: 1, this machine; H > 1, emulated hosts (tools/on_hosts.sh: network
  // namespaces, N/H ranks each) whose links run at link_gbit Gbit/s (0: unshaped).
  int hosts = 1;
  double link_gbit = 0;
  std::string model = "mlp";                            // or "gpt"
  std::vector<int64_t> layers = {784, 1024, 1024, 10};  // --model mlp
  gpt::Config gpt = default_gpt();                      // --model gpt
  // Global batch (MLP: samples; GPT: sequences of gpt.context tokens): single takes all of it, DP
  // scatters it, each DDP rank takes 1/N.
  int64_t batch = 256;
  int warmup = 5, steps = 50;
  double lr = 0.01;
  std::vector<std::string> modes = {"single",      "dp",           "ddp-naive",  "ddp-flat",
                                    "ddp-overlap", "ddp-bucketed", "ddp-no_sync"};
  std::vector<double> caps = {1, 5, 25, 100};  // ddp-bucketed's bucket_cap_mb sweep ("MB" as PyTorch says; 2^20 bytes)
  // The first bucket's cap (--first-cap). NAN: 1 MB (PyTorch's first bucket), or the cap when that is
  // smaller (PyTorch keeps 1 MB whatever the cap; here a sweep below 1 MB cuts the first bucket too).
  double first_cap = NAN;
  std::string data = "synthetic";  // or "fashion-mnist" (the real images)
  double tolerance = 1e-4;         // correct: max |parameter - single's| after the run is at most this
  std::string json, csv, trace_dir;
  int trace_steps = 3;  // the last this many timed steps go into each trace
  bool scaling_model = false, torch = true, micro = false;
  std::string python = "/usr/bin/python3";  // the interpreter with torch for PyTorch's rows (--python)

  ringgrad::Device device_at(int index) const {
    return device == "cuda" ? ringgrad::Device::cuda(index) : ringgrad::Device::cpu(index);
  }
  // Threads of one CPU device: its share of the cores.
  int threads_per_device() const {
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / devices);
  }
  // "2 hosts, 2.5 Gbit/s links", "2 hosts, unshaped links", or "1 host".
  std::string hosts_text() const {
    if (hosts == 1) return "1 host";
    char speed[32];
    std::snprintf(speed, sizeof speed, "%g Gbit/s", link_gbit);
    return std::to_string(hosts) + " hosts, " + (link_gbit > 0 ? std::string(speed) : "unshaped") + " links";
  }
  std::string model_name() const {
    if (model == "gpt")
      return "GPT " + std::to_string(gpt.layers) + " layers, width " + std::to_string(gpt.width) + ", " +
             std::to_string(gpt.heads) + " heads, context " + std::to_string(gpt.context);
    std::string name = "MLP";
    for (size_t i = 0; i < layers.size(); ++i) name += (i ? "-" : " ") + std::to_string(layers[i]);
    return name;
  }
  // What one sample brings in and what comes out per sample (DP scatters one, gathers the other).
  int64_t input_bytes_per_sample() const { return model == "gpt" ? gpt.context * 8 : layers.front() * 4; }
  int64_t output_bytes_per_sample() const { return model == "gpt" ? gpt.context * gpt.vocab * 4 : layers.back() * 4; }
  // A ddp-bucketed row's first-bucket cap.
  double first_cap_for(double cap) const { return std::isnan(first_cap) ? std::min(1.0, cap) : first_cap; }

  // The GPT of the demo: the largest the demo's time allows on two cores (docs/benchmarks.md).
  static gpt::Config default_gpt() {
    gpt::Config c;
    c.layers = 4;
    c.width = 256;
    c.heads = 4;
    c.context = 64;
    return c;
  }
};

// A row's name: the mode, with the bucket cap when there is one ("ddp-bucketed-25MB").
inline std::string mode_id(const std::string& mode, double cap_mb) {
  if (std::isnan(cap_mb)) return mode;
  char cap[32];
  std::snprintf(cap, sizeof cap, "%g", cap_mb);
  return mode + "-" + cap + "MB";
}

// One DDP variant: a name and the DDPOptions that make it. They are the same DistributedDataParallel,
// with the features that make it fast switched off one at a time:
//   ddp-naive     every parameter its own all-reduce, all after backward   (no buckets, no overlap)
//   ddp-flat      one all-reduce of all gradients after backward           (one bucket, no overlap)
//   ddp-overlap   every parameter its own all-reduce, launched from its hook (overlap, no buckets)
//   ddp-bucketed  buckets of bucket_cap_mb, launched as each fills          (PyTorch's DDP)
//   ddp-no_sync   the same steps inside no_sync(): no communication at all. Not a way to train (the
//                 replicas drift apart), but the floor: what N devices cost before any all-reduce,
//                 including what the machine loses when N processes share it.
struct DdpVariant {
  std::string mode;
  double cap_mb = NAN;  // ddp-bucketed only
  ringgrad::parallel::DDPOptions options;
  bool sync = true;  // false: every step inside ddp.no_sync()
  std::string id() const { return mode_id(mode, cap_mb); }
};

inline std::vector<DdpVariant> ddp_variants(const Options& o) {
  using ringgrad::parallel::DDPOptions;
  std::vector<DdpVariant> out;
  for (const std::string& mode : o.modes) {
    if (mode == "ddp-naive") out.push_back({mode, NAN, DDPOptions().bucket_cap_mb(0).overlap(false)});
    if (mode == "ddp-flat")
      out.push_back({mode, NAN, DDPOptions().bucket_cap_mb(1e6).first_bucket_cap_mb(1e6).overlap(false)});
    if (mode == "ddp-overlap") out.push_back({mode, NAN, DDPOptions().bucket_cap_mb(0).overlap(true)});
    if (mode == "ddp-bucketed")
      for (double cap : o.caps)  // PyTorch's defaults: the first bucket 1 MB, the rest `cap`
        out.push_back(
            {mode, cap, DDPOptions().bucket_cap_mb(cap).first_bucket_cap_mb(o.first_cap_for(cap)).overlap(true)});
    if (mode == "ddp-no_sync") out.push_back({mode, NAN, DDPOptions(), false});
  }
  for (DdpVariant& v : out) v.options.comm_hook(ringgrad::parallel::comm_hook_named(o.comm_hook));
  return out;
}

// The model every mode trains, identical everywhere: same layers, same initial values.
template <typename Model>
std::shared_ptr<Model> make_model(const Options& o, ringgrad::Device device);

template <>
inline std::shared_ptr<ringgrad::nn::MLP> make_model(const Options& o, ringgrad::Device device) {
  ringgrad::manual_seed(0);
  auto model = std::make_shared<ringgrad::nn::MLP>(o.layers);
  model->to(device);
  return model;
}

template <>
inline std::shared_ptr<gpt::Gpt> make_model(const Options& o, ringgrad::Device device) {
  ringgrad::manual_seed(0);
  auto model = std::make_shared<gpt::Gpt>(o.gpt);
  model->to(device);
  return model;
}

// Calls body(ModelType<M>{}) with M the model class --model names: code written once for both.
template <typename M>
struct ModelType {
  using type = M;
};
template <typename Body>
auto with_model(const Options& o, Body&& body) {
  return o.model == "gpt" ? body(ModelType<gpt::Gpt>{}) : body(ModelType<ringgrad::nn::MLP>{});
}

// The model's parameters' sizes in bytes, in registration order.
inline std::vector<int64_t> parameter_bytes(const Options& o) {
  return with_model(o, [&](auto type) {
    std::vector<int64_t> bytes;
    for (const ringgrad::Tensor& p :
         make_model<typename decltype(type)::type>(o, ringgrad::Device::cpu())->parameters())
      bytes.push_back(p.numel() * p.element_size());
    return bytes;
  });
}

// The loss of one step: cross-entropy of the logits against the labels -- per sample for the MLP
// ([B, classes] against [B]), per token for the GPT ([B, T, vocab] against [B, T], flattened).
inline ringgrad::Tensor loss_of(const ringgrad::Tensor& logits, const ringgrad::Tensor& labels) {
  return ringgrad::cross_entropy(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}));
}

// A few global batches, made before any timing and cycled through.
//   MLP: inputs [batch, layers[0]] and labels [batch]. Synthetic: normal inputs, labels
//        (i * 7 + k) % classes. Fashion-MNIST: the first images of the training set, scaled to
//        [0, 1] (its 784 pixels fix layers[0] = 784).
//   GPT: tokens [batch, context] and the next tokens [batch, context]: windows of one random byte
//        stream (uniform bytes: nothing to learn, but every step costs what a real text's does).
struct Data {
  std::vector<ringgrad::Tensor> x, y;
};

inline Data make_data(const Options& o, int batches = 4) {
  using namespace ringgrad;
  const int64_t in = o.layers.front(), classes = o.layers.back();
  Data d;
  if (o.data == "fashion-mnist") {
    RINGGRAD_CHECK(in == 784 && classes == 10, "dp_vs_ddp: --data fashion-mnist needs layers 784,...,10, got ",
                   o.model_name());
    const nn::data::FashionMNIST train(nn::data::Split::Train);
    RINGGRAD_CHECK(train.size() >= batches * o.batch, "dp_vs_ddp: Fashion-MNIST has ", train.size(),
                   " images, fewer than ", batches, " batches of ", o.batch);
    const Tensor pixels = train.images().reshape({train.size(), 784}).to(DType::f32) * (1.0 / 255.0);
    for (int k = 0; k < batches; ++k) {
      // clone(): a batch of its own, not a view that would keep the whole dataset alive (and
      // counted in every mode's peak memory).
      d.x.push_back(pixels.narrow(0, k * o.batch, o.batch).clone());
      d.y.push_back(train.labels().narrow(0, k * o.batch, o.batch).clone());
    }
    return d;
  }
  RINGGRAD_CHECK(o.data == "synthetic", "dp_vs_ddp: --data expected synthetic or fashion-mnist, got ", o.data);
  if (o.model == "gpt") {
    const int64_t t = o.gpt.context;
    for (int k = 0; k < batches; ++k) {
      const Tensor stream =
          (rand({o.batch, t + 1}, DType::f64, 2000 + k) * static_cast<double>(o.gpt.vocab)).to(DType::i64);
      d.x.push_back(stream.narrow(1, 0, t).contiguous());
      d.y.push_back(stream.narrow(1, 1, t).contiguous());
    }
    return d;
  }
  for (int k = 0; k < batches; ++k) {
    d.x.push_back(randn({o.batch, in}, DType::f32, 1000 + k));
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < o.batch; ++i) labels.push_back((i * 7 + k) % classes);
    d.y.push_back(from_vector(labels, {o.batch}));
  }
  return d;
}

// Rows [rank * b, (rank + 1) * b) of every batch, b = batch / devices, on `device`: one rank's shard.
// With one rank, the batches themselves (moved to `device` if they are not there).
inline Data shard(const Data& global, int rank, int ranks, ringgrad::Device device) {
  Data d;
  for (size_t k = 0; k < global.x.size() && ranks == 1; ++k) {
    d.x.push_back(global.x[k].to(device));
    d.y.push_back(global.y[k].to(device));
  }
  for (size_t k = 0; k < global.x.size() && ranks > 1; ++k) {
    const int64_t b = global.x[k].size(0) / ranks;
    d.x.push_back(global.x[k].narrow(0, rank * b, b).clone().to(device));  // the shard alone, not a view
    d.y.push_back(global.y[k].narrow(0, rank * b, b).clone().to(device));
  }
  return d;
}

struct Stats {
  double median = NAN, p10 = NAN, p90 = NAN;
};

inline Stats stats_of(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)]; };
  const size_t mid = v.size() / 2;
  return {v.size() % 2 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]), at(0.1), at(0.9)};
}

// Waits for the device's queued work, so a clock read afterwards means "done" (no-op on the CPU).
inline void sync(ringgrad::Device device) {
  if (device.is_cuda()) ringgrad::cuda_synchronize(device.index);
}

// All parameters, flattened to one float64 vector on the host, in registration order.
inline std::vector<double> flat_parameters(const std::vector<ringgrad::Tensor>& params) {
  std::vector<double> out;
  for (const ringgrad::Tensor& p : params) {
    const auto v = p.detach().to(ringgrad::Device::cpu()).to(ringgrad::DType::f64).to_vector<double>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace bench
