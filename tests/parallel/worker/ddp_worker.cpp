// tests/parallel/worker/ddp_worker.cpp: one rank of a DistributedDataParallel test (test_ddp.cpp).
//
//   RANK=r WORLD_SIZE=n MASTER_ADDR=... MASTER_PORT=... [BACKEND=gloo] ringgrad_ddp_worker SCENARIO [key=value ...]
//
// The reference is computed in every rank, locally: a model made with rank 0's seed, trained on the
// whole global batch in one process. DDP runs each rank on its shard (rows rank*b .. rank*b+b-1 of
// the global batch), starting from different random weights on every rank -- so the comparison also
// checks that construction broadcast rank 0's. Prints "ok" and exits 0, or what differed and exits
// 1; a ringgrad::Error exits 3 after printing "error: <message>".
#include <ringgrad/ringgrad.h>

#include <ringgrad/core/base/fp16.h>

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace ringgrad;

namespace {

std::map<std::string, std::string> g_args;
std::string arg(const std::string& key, const std::string& fallback) {
  auto it = g_args.find(key);
  return it == g_args.end() ? fallback : it->second;
}

constexpr int64_t kIn = 9, kClasses = 5;

std::shared_ptr<nn::MLP> make_model(uint64_t seed, DType dtype) {
  manual_seed(seed);
  auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{kIn, 33, 17, kClasses});
  model->to(dtype);
  return model;
}

// Step s's global batch of `rows` rows.
std::pair<Tensor, Tensor> global_batch(int64_t step, int64_t rows, DType dtype) {
  std::vector<int64_t> labels;
  for (int64_t r = 0; r < rows; ++r) labels.push_back((r * 3 + step) % kClasses);
  return {randn({rows, kIn}, dtype, /*seed=*/500 + step), from_vector(labels, {rows})};
}

std::unique_ptr<nn::optim::Optimizer> make_optimizer(const std::string& name, std::vector<Tensor> params) {
  if (name == "adamw")
    return std::make_unique<nn::optim::AdamW>(params, nn::optim::AdamWOptions(0.01).weight_decay(0.05));
  return std::make_unique<nn::optim::SGD>(params, nn::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
}

double max_relative_difference(const nn::Module& a, const nn::Module& b) {
  double worst = 0;
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto va = pa[i].second.to(DType::f64).to_vector<double>(),
               vb = pb[i].second.to(DType::f64).to_vector<double>();
    for (size_t j = 0; j < va.size(); ++j)
      worst = std::max(worst, std::abs(va[j] - vb[j]) / std::max(1.0, std::abs(vb[j])));
  }
  return worst;
}

// view=0 / view=1 set gradient_as_bucket_view; without it, DDP's default (on).
parallel::DDPOptions ddp_options() {
  parallel::DDPOptions options = parallel::DDPOptions()
                                     .bucket_cap_mb(std::stod(arg("cap", "25")))
                                     .first_bucket_cap_mb(std::stod(arg("first_cap", "1")))
                                     .overlap(arg("overlap", "1") == "1")
                                     .comm_hook(parallel::comm_hook_named(arg("hook", "none")));
  if (g_args.count("view")) options.gradient_as_bucket_view(arg("view", "1") == "1");
  return options;
}

// After a synchronised backward: with gradient_as_bucket_view every .grad must be its parameter's
// gradient destination (the bucket slot the average is in), without it no destination may be set.
bool grads_are_bucket_views(const std::vector<Tensor>& params, bool view) {
  for (const Tensor& p : params) {
    const bool is_view = p.grad_destination().defined() && p.grad().same(p.grad_destination());
    if (is_view != view || (!view && p.grad_destination().defined())) return false;
  }
  return true;
}

// K steps of DDP against K steps of one process on the global batch.
int train(parallel::ProcessGroup& pg) {
  const DType dtype = arg("dtype", "f64") == "f32" ? DType::f32 : DType::f64;
  const int64_t per_rank = std::stoll(arg("rows", "4")), steps = std::stoll(arg("steps", "4"));
  const int64_t rows = per_rank * pg.size();
  auto reference = make_model(42, dtype);
  auto opt_ref = make_optimizer(arg("opt", "sgd"), reference->parameters());
  auto model = make_model(42 + pg.rank(), dtype);  // different on every rank until DDP broadcasts
  // device=cuda: the DDP replica and its shards on the GPU (every rank on cuda:0 -- the ring backend
  // stages through pinned host memory; NCCL would refuse two ranks on one GPU). device=cuda-local:
  // each rank on its own GPU, cuda:LOCAL_RANK, as a real job runs.
  const std::string where = arg("device", "cpu");
  const Device device = where == "cuda"         ? Device::cuda(0)
                        : where == "cuda-local" ? Device::cuda(std::stoi(std::getenv("LOCAL_RANK")))
                                                : Device::cpu();
  model->to(device);
  parallel::DistributedDataParallel<nn::MLP> ddp(model, std::shared_ptr<parallel::ProcessGroup>(&pg, [](auto*) {}),
                                                 ddp_options());
  auto opt = make_optimizer(arg("opt", "sgd"), ddp.parameters());
  for (int64_t s = 0; s < steps; ++s) {
    const auto [x, y] = global_batch(s, rows, dtype);
    opt_ref->zero_grad();
    cross_entropy(reference->forward(x), y).backward();
    opt_ref->step();

    const Tensor xs = x.narrow(0, pg.rank() * per_rank, per_rank).to(device);
    const Tensor ys = y.narrow(0, pg.rank() * per_rank, per_rank).to(device);
    opt->zero_grad();
    // replace_grad=1: on odd steps the user's own tensors are .grad (backward adds into them, off
    // the buckets); DDP must average them all the same and make .grad its bucket slot again.
    if (arg("replace_grad", "0") == "1" && s % 2 == 1)
      for (const Tensor& p : ddp.parameters()) p.set_grad(zeros_like(p));
    cross_entropy(ddp(xs), ys).backward();
    if (!grads_are_bucket_views(ddp.parameters(), ddp_options().gradient_as_bucket_view())) {
      std::printf("rank %d: step %lld: .grad is%s the bucket slot\n", pg.rank(), static_cast<long long>(s),
                  ddp_options().gradient_as_bucket_view() ? " not" : "");
      return 1;
    }
    opt->step();
  }
  ddp.module()->to(Device::cpu());
  const double diff = max_relative_difference(*ddp.module(), *reference);
  // float32 on a GPU sums in another order than the CPU reference: 1e-4 there. With hook=bf16 the
  // gradients travel with 8 bits of mantissa (a relative error up to 2^-9 each): 2e-2 after a few
  // steps. With hook=fp16, 11 bits (up to 2^-12 each, 8 times less) on gradients far inside
  // float16's range: 2.5e-3. Either way more than 1e-7, or the compression did not happen.
  const std::string hook = arg("hook", "none");
  const bool compressed = hook == "bf16" || hook == "fp16";
  const double tolerance = hook == "bf16"        ? 2e-2
                           : hook == "fp16"      ? 2.5e-3
                           : dtype == DType::f64 ? 1e-10
                           : device.is_cuda()    ? 1e-4
                                                 : 1e-5;
  if (compressed && diff < 1e-7) {
    std::printf("rank %d: max relative difference %.3g with the %s hook: no compression happened\n", pg.rank(), diff,
                hook.c_str());
    return 1;
  }
  std::printf("rank %d: buckets %zu, max relative difference %.3g (tolerance %.1g)\n", pg.rank(), ddp.buckets().size(),
              diff, tolerance);
  return diff <= tolerance ? 0 : 1;
}

// Rank r's gradient i for fp16_range: every rank's value at i has the same sign, so the average
// has no cancellation and float16's rounding bounds its error. The first three sum past 65504.
constexpr int64_t kRangeValues = 7;
float range_value(int r, int64_t i) {
  const float values[kRangeValues] = {40000.0f, -50000.0f, 65504.0f, 30000.0f, 1.5f, -1e-3f, 3e-5f};
  return values[i] * (1.0f - 0.01f * static_cast<float>(r));
}

// fp16_compress_hook on gradients whose float16 sum overflows 65504 but whose average does not:
// divided by the world size before the all-reduce, they arrive finite, within float16's rounding
// of the average. The same values all-reduced as float16 without the division overflow -- which
// shows that they test what they claim to.
int fp16_range(parallel::ProcessGroup& pg) {
  const int world = pg.size();
  std::vector<float> mine;
  for (int64_t i = 0; i < kRangeValues; ++i) mine.push_back(range_value(pg.rank(), i));
  parallel::GradBucket bucket{0, from_vector(mine, {kRangeValues})};
  parallel::fp16_compress_hook()(pg, bucket)->wait();
  const std::vector<float> got = bucket.buffer.to_vector<float>();
  int failures = 0;
  for (int64_t i = 0; i < kRangeValues; ++i) {
    double want = 0;
    for (int r = 0; r < world; ++r) want += range_value(r, i);
    want /= world;
    // One rounding of each rank's share to float16 (2^-11 relative) and one per partial sum on the
    // ring (world - 1 of them), all of one sign: world * 2^-11 of the average bounds them. 3e-5 is
    // a subnormal in float16, whose spacing of 2^-24 adds to that.
    const double tolerance = std::abs(want) * world * std::ldexp(1.0, -11) + world * std::ldexp(1.0, -24);
    const bool ok = std::isfinite(got[i]) && std::abs(got[i] - want) <= tolerance;
    std::printf("rank %d: element %lld: %.9g, average %.9g (tolerance %.3g) %s\n", pg.rank(), static_cast<long long>(i),
                got[i], want, tolerance, ok ? "ok" : "WRONG");
    if (!ok) ++failures;
  }
  // The same values as float16, averaged after the sum: the sum overflows.
  Tensor plain = empty({kRangeValues}, DType::f16);
  auto* bits = static_cast<uint16_t*>(plain.data());
  for (int64_t i = 0; i < kRangeValues; ++i) bits[i] = float_to_fp16(mine[static_cast<size_t>(i)]);
  pg.all_reduce(plain, parallel::ReduceOp::Avg)->wait();
  const float summed_first = fp16_to_float(bits[0]);
  std::printf("rank %d: without the division first, element 0 is %g\n", pg.rank(), summed_first);
  if (world > 1 && !std::isinf(summed_first)) ++failures;
  return failures == 0 ? 0 : 1;
}

// Four micro-steps, the first three inside no_sync, equal one step on the four batches together.
int accumulate(parallel::ProcessGroup& pg) {
  const int64_t per_rank = 3, micro = 4, rows = per_rank * pg.size();
  auto reference = make_model(42, DType::f64);
  auto model = make_model(42 + pg.rank(), DType::f64);
  parallel::DistributedDataParallel<nn::MLP> ddp(model, std::shared_ptr<parallel::ProcessGroup>(&pg, [](auto*) {}),
                                                 ddp_options());
  nn::optim::SGD opt_ref(reference->parameters(), nn::optim::SGDOptions(0.1));
  nn::optim::SGD opt(ddp.parameters(), nn::optim::SGDOptions(0.1));

  // Reference: one step on the 4 global batches at once (mean over all of their rows).
  std::vector<Tensor> xs, ys;
  for (int64_t k = 0; k < micro; ++k) {
    const auto [x, y] = global_batch(k, rows, DType::f64);
    xs.push_back(x);
    ys.push_back(y);
  }
  cross_entropy(reference->forward(cat(xs, 0)), cat(ys, 0)).backward();
  opt_ref.step();

  for (int64_t k = 0; k < micro; ++k) {
    const Tensor x = xs[k].narrow(0, pg.rank() * per_rank, per_rank),
                 y = ys[k].narrow(0, pg.rank() * per_rank, per_rank);
    // Each micro-batch's loss is scaled by 1/4, so the accumulated gradient is the mean over all.
    if (k < micro - 1) {
      auto guard = ddp.no_sync();
      (cross_entropy(ddp(x), y) * (1.0 / micro)).backward();
    } else {
      (cross_entropy(ddp(x), y) * (1.0 / micro)).backward();
    }
  }
  const int64_t synced = ddp.timings().step;
  opt.step();
  const double diff = max_relative_difference(*ddp.module(), *reference);
  std::printf("rank %d: synchronised backward passes %lld, max relative difference %.3g\n", pg.rank(),
              static_cast<long long>(synced), diff);
  return diff <= 1e-10 && synced == 1 ? 0 : 1;
}

// A model whose `spare` layer is used in forward only while use_spare is set.
struct WithSpare : nn::Module {
  WithSpare() {
    used = register_module("used", std::make_shared<nn::Linear>(kIn, kClasses));
    spare = register_module("spare", std::make_shared<nn::Linear>(kIn, kClasses));
  }
  Tensor forward(const Tensor& x) override {
    return use_spare ? used->forward(x) + spare->forward(x) : used->forward(x);
  }
  std::shared_ptr<nn::Linear> used, spare;
  bool use_spare = false;
};

// The same values on every rank? (all-gathers the tensor and compares with rank 0's copy)
bool same_on_every_rank(parallel::ProcessGroup& pg, const Tensor& t) {
  std::vector<Tensor> all;
  for (int r = 0; r < pg.size(); ++r) all.push_back(zeros_like(t));
  pg.all_gather(all, t.contiguous())->wait();
  for (int r = 1; r < pg.size(); ++r)
    if (all[r].to_vector<float>() != all[0].to_vector<float>()) return false;
  return true;
}

// Three ways a step can go wrong quietly, each checked against what must happen:
//  1. a forward under NoGradGuard between a forward and its backward must not cancel the averaging;
//  2. with find_unused_parameters, a collective of the user's between forward and backward must
//     pair up on every rank (the unused bucket is launched inside backward, not in forward);
//  3. an unused parameter contributes what no_sync steps accumulated in its .grad, not zero.
int quiet_failures(parallel::ProcessGroup& pg) {
  const auto group = std::shared_ptr<parallel::ProcessGroup>(&pg, [](auto*) {});
  manual_seed(11);
  auto model = std::make_shared<WithSpare>();
  parallel::DistributedDataParallel<WithSpare> ddp(
      model, group, parallel::DDPOptions().bucket_cap_mb(0).find_unused_parameters(true));
  const Tensor x = randn({4, kIn}, DType::f32, 20 + pg.rank());  // different data on every rank
  std::vector<int64_t> labels = {0, 1, 2, 3};
  const Tensor y = from_vector(labels, {4});
  int failures = 0;

  // 1.
  const Tensor out = ddp(x);
  {
    NoGradGuard no_grad;
    ddp(x);  // e.g. a metrics forward
  }
  cross_entropy(out, y).backward();
  if (ddp.timings().step != 1 || !same_on_every_rank(pg, model->used->weight.grad())) {
    std::printf("rank %d: 1. a no-grad forward cancelled the averaging\n", pg.rank());
    ++failures;
  }

  // 2. rank 0 leaves `spare` unused, the others use it -- and a collective runs between.
  model->zero_grad();
  model->use_spare = pg.rank() != 0;
  const Tensor out2 = ddp(x);
  Tensor count = full({1}, 1.0);
  pg.all_reduce(count)->wait();
  cross_entropy(out2, y).backward();
  if (count.item() != pg.size() || !same_on_every_rank(pg, model->spare->weight.grad())) {
    std::printf("rank %d: 2. a collective between forward and backward did not pair up\n", pg.rank());
    ++failures;
  }

  // 3. spare used in a no_sync micro-step, unused in the synchronised one.
  model->zero_grad();
  model->use_spare = true;
  {
    auto guard = ddp.no_sync();
    cross_entropy(ddp(x), y).backward();
  }
  model->use_spare = false;
  cross_entropy(ddp(x), y).backward();
  bool nonzero = false;
  for (float g : model->spare->weight.grad().to_vector<float>()) nonzero = nonzero || g != 0.0f;
  if (!nonzero || !same_on_every_rank(pg, model->spare->weight.grad())) {
    std::printf("rank %d: 3. the accumulated gradient of an unused parameter was lost\n", pg.rank());
    ++failures;
  }
  return failures == 0 ? 0 : 1;
}

int unused(parallel::ProcessGroup& pg) {
  manual_seed(7);
  auto model = std::make_shared<WithSpare>();
  parallel::DistributedDataParallel<WithSpare> ddp(
      model, std::shared_ptr<parallel::ProcessGroup>(&pg, [](auto*) {}),
      ddp_options().find_unused_parameters(arg("find_unused", "0") == "1"));
  const auto [x, y] = global_batch(0, 4, DType::f32);
  cross_entropy(ddp(x), y).backward();  // without find_unused this throws, naming spare.weight
  bool spare_zero = model->spare->weight.grad().defined();
  if (spare_zero)
    for (float g : model->spare->weight.grad().to_vector<float>()) spare_zero = spare_zero && g == 0.0f;
  std::printf("rank %d: trained with an unused layer; its gradient is %s\n", pg.rank(), spare_zero ? "zero" : "wrong");
  // And the next step works too.
  cross_entropy(ddp(x), y).backward();
  return spare_zero ? 0 : 1;
}

// Many buckets on a model big enough that backward takes a while: the first bucket's all-reduce must
// start before backward ends.
int overlap(parallel::ProcessGroup& pg) {
  manual_seed(3);
  auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{256, 512, 512, 512, 10});
  parallel::DistributedDataParallel<nn::MLP> ddp(model, std::shared_ptr<parallel::ProcessGroup>(&pg, [](auto*) {}),
                                                 parallel::DDPOptions().bucket_cap_mb(0.25).first_bucket_cap_mb(0.05));
  // Step 0 warms up (first use of every buffer); of the next three, at least two must overlap --
  // one late start on a loaded machine is not a failure of the design.
  int overlapped = 0;
  for (int step = 0; step < 4; ++step) {
    const Tensor x = randn({256, 256}, DType::f32, 10 + step);
    std::vector<int64_t> labels(256, step % 10);
    cross_entropy(ddp(x), from_vector(labels, {256})).backward();
    const parallel::DDPTimings t = ddp.timings();
    if (step > 0 && t.buckets.size() >= 2 && t.buckets[0].comm_start < t.backward_end &&
        t.buckets[0].ready < t.backward_end)
      ++overlapped;
    std::printf(
        "rank %d step %d: %zu buckets, first all-reduce started %.0f us before backward ended, exposed %.0f us\n",
        pg.rank(), step, t.buckets.size(),
        std::chrono::duration<double, std::micro>(t.backward_end - t.buckets.at(0).comm_start).count(),
        t.exposed_comm_us);
  }
  return overlapped >= 2 ? 0 : 1;
}

// Rank 1 builds a wider hidden layer: construction must fail on every rank, naming the parameter.
int mismatch(parallel::ProcessGroup& pg) {
  manual_seed(1);
  auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{kIn, pg.rank() == 1 ? 34 : 33, kClasses});
  parallel::DistributedDataParallel<nn::MLP> ddp(model, std::shared_ptr<parallel::ProcessGroup>(&pg, [](auto*) {}));
  return 1;  // not reached
}

// Rank 1 dies in the middle of training; the others must fail fast (ringrun stops the job).
int die(parallel::ProcessGroup& pg) {
  auto model = make_model(42, DType::f32);
  parallel::DistributedDataParallel<nn::MLP> ddp(model, std::shared_ptr<parallel::ProcessGroup>(&pg, [](auto*) {}));
  nn::optim::SGD opt(ddp.parameters(), nn::optim::SGDOptions(0.1));
  for (int64_t s = 0; s < 100000; ++s) {
    if (pg.rank() == 1 && s == 20) ::kill(::getpid(), SIGKILL);
    const auto [x, y] = global_batch(s, 8, DType::f32);
    opt.zero_grad();
    cross_entropy(ddp(x), y).backward();
    opt.step();
  }
  return 1;
}

// A checkpoint written by rank 0 has no "module." prefix and loads into a plain model that then
// predicts exactly what the DDP-trained model does.
int checkpoint(parallel::ProcessGroup& pg) {
  auto model = make_model(42 + pg.rank(), DType::f32);
  parallel::DistributedDataParallel<nn::MLP> ddp(model, std::shared_ptr<parallel::ProcessGroup>(&pg, [](auto*) {}));
  nn::optim::SGD opt(ddp.parameters(), nn::optim::SGDOptions(0.1));
  for (int64_t s = 0; s < 3; ++s) {
    const auto [x, y] = global_batch(s, 4 * pg.size(), DType::f32);
    opt.zero_grad();
    cross_entropy(ddp(x.narrow(0, pg.rank() * 4, 4)), y.narrow(0, pg.rank() * 4, 4)).backward();
    opt.step();
  }
  const std::string path = arg("path", "/tmp/ddp.safetensors");
  if (pg.rank() == 0) nn::save_model(path, *ddp.module());
  pg.barrier()->wait();
  for (const auto& [name, t] : ddp.state_dict())
    if (name.rfind("module.", 0) == 0) return 1;
  auto plain = make_model(99, DType::f32);
  nn::load_model(path, *plain);
  const Tensor x = randn({6, kIn}, DType::f32, 1234);
  const bool same = plain->forward(x).to_vector<float>() == ddp.module()->forward(x).to_vector<float>();
  std::printf("rank %d: plain model from rank 0's checkpoint predicts %s\n", pg.rank(),
              same ? "the same" : "differently");
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  for (int i = 2; i < argc; ++i) {
    const std::string kv = argv[i];
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) g_args[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  try {
    const char* backend = std::getenv("BACKEND");  // default: the ring
    auto pg = parallel::init_process_group(
        backend != nullptr ? backend : "ring",
        parallel::InitOptions().transport(arg("transport", "auto")).timeout(std::chrono::seconds(30)));
    int rc = 2;
    if (scenario == "train")
      rc = train(*pg);
    else if (scenario == "accumulate")
      rc = accumulate(*pg);
    else if (scenario == "unused")
      rc = unused(*pg);
    else if (scenario == "overlap")
      rc = overlap(*pg);
    else if (scenario == "mismatch")
      rc = mismatch(*pg);
    else if (scenario == "die")
      rc = die(*pg);
    else if (scenario == "checkpoint")
      rc = checkpoint(*pg);
    else if (scenario == "quiet_failures")
      rc = quiet_failures(*pg);
    else if (scenario == "fp16_range")
      rc = fp16_range(*pg);
    else
      std::printf("unknown scenario '%s'\n", scenario.c_str());
    std::printf(rc == 0 ? "rank %d: ok\n" : "rank %d: failed\n", pg->rank());
    std::fflush(stdout);
    return rc;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    std::fflush(stdout);
    return 3;
  }
}
