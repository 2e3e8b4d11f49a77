// parallel/comm_hook.cpp: the built-in communication hooks, and Work::then.
#include <ringgrad/parallel/comm_hook.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <utility>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/base/bf16.h>
#include <ringgrad/core/base/fp16.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace parallel {
namespace {

// The inner collective's Work, then a continuation, run once, by the first waiter.
class ThenWork final : public Work {
 public:
  ThenWork(std::shared_ptr<Work> inner, std::function<void()> then)
      : Work(inner->description()), inner_(std::move(inner)), then_(std::move(then)) {}

  bool is_completed() const override { return inner_->is_completed(); }

  void wait() override {
    std::call_once(once_, [this] {
      std::exception_ptr error;
      try {
        inner_->wait();
        then_();
      } catch (...) {
        error = std::current_exception();
      }
      {
        // The collective's own times, not the continuation's, for DDP's timings and traces.
        std::lock_guard<std::mutex> lock(mutex_);
        start_ = inner_->start_time();
        end_ = inner_->end_time();
        error_ = error;
        done_ = true;
      }
      done_cv_.notify_all();
    });
    Work::wait();  // rethrows the error, for this waiter and every later one
  }

 private:
  std::shared_ptr<Work> inner_;
  std::function<void()> then_;
  std::once_flag once_;
};

}  // namespace

std::shared_ptr<Work> then(std::shared_ptr<Work> inner, std::function<void()> then) {
  RINGGRAD_CHECK(inner != nullptr, "then: expected a Work, got none");
  return std::make_shared<ThenWork>(std::move(inner), std::move(then));
}

CommHook allreduce_hook() {
  return [](ProcessGroup& group, GradBucket& bucket) { return group.all_reduce(bucket.buffer, ReduceOp::Avg); };
}

namespace {

// The bucket's float32 or float64 values as bfloat16 bits in `out` (host memory), and back.
void narrow_to_bf16(const Tensor& from, const Tensor& out) {
  auto* bits = static_cast<uint16_t*>(out.data());
  const int64_t n = from.numel();
  if (from.dtype() == DType::f32) {
    const auto* values = static_cast<const float*>(from.data());
    for (int64_t i = 0; i < n; ++i) bits[i] = float_to_bf16(values[i]);
  } else {
    const auto* values = static_cast<const double*>(from.data());
    for (int64_t i = 0; i < n; ++i) bits[i] = float_to_bf16(static_cast<float>(values[i]));
  }
}
void widen_from_bf16(const Tensor& from, const Tensor& out) {
  const auto* bits = static_cast<const uint16_t*>(from.data());
  const int64_t n = out.numel();
  if (out.dtype() == DType::f32) {
    auto* values = static_cast<float*>(out.data());
    for (int64_t i = 0; i < n; ++i) values[i] = bf16_to_float(bits[i]);
  } else {
    auto* values = static_cast<double*>(out.data());
    for (int64_t i = 0; i < n; ++i) values[i] = bf16_to_float(bits[i]);
  }
}

// `work` (the all-reduce of `compressed`), then the result widened back into the bucket: on the host
// by `widen_on_host`, on a GPU by a cast kernel.
std::shared_ptr<Work> widen_when_done(std::shared_ptr<Work> work, const Tensor& buffer, const Tensor& compressed,
                                      void (*widen_on_host)(const Tensor&, const Tensor&)) {
  return then(std::move(work), [buffer, compressed, widen_on_host] {
    const NoGradGuard no_grad;
    if (buffer.device().is_cpu())
      widen_on_host(compressed, buffer);
    else
      buffer.copy_(compressed);  // back to the bucket's dtype
  });
}

}  // namespace

CommHook bf16_compress_hook() {
  return [](ProcessGroup& group, GradBucket& bucket) -> std::shared_ptr<Work> {
    const Tensor buffer = bucket.buffer;
    if (buffer.dtype() == DType::bf16) return group.all_reduce(buffer, ReduceOp::Avg);
    RINGGRAD_CHECK(buffer.dtype() == DType::f32 || buffer.dtype() == DType::f64,
                   "bf16_compress_hook: expected a float32 or float64 bucket, got ", buffer.dtype());
    const NoGradGuard no_grad;  // gradients are data here, not part of any graph
    // On a GPU the cast is a kernel; on the host, where tensors hold bfloat16 but compute nothing
    // in it, the conversion is written out here.
    const bool host = buffer.device().is_cpu();
    const Tensor compressed = host ? empty({buffer.numel()}, DType::bf16) : buffer.to(DType::bf16);
    if (host) narrow_to_bf16(buffer, compressed);
    return widen_when_done(group.all_reduce(compressed, ReduceOp::Avg), buffer, compressed, widen_from_bf16);
  };
}

namespace {

// d as a float rounded to odd: truncated toward zero, its last bit set when anything was dropped.
// Rounding that float to float16 (11 significant bits, 13 fewer than float's 24) gives what rounding
// d to float16 directly gives -- one rounding, as a GPU's __double2half does, not two.
float round_to_odd(double d) {
  auto f = static_cast<float>(d);
  if (std::isnan(f) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof(bits));
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// The bucket's values scaled by 1 / world size -- in float32, or float64 for a float64 bucket -- and
// rounded to float16 bits in `out` (host memory); and the float16 average back into the bucket.
void narrow_to_fp16(const Tensor& from, const Tensor& out, int world) {
  auto* bits = static_cast<uint16_t*>(out.data());
  const int64_t n = from.numel();
  // Scaled a block at a time into a buffer that stays in L1, then converted (F16C where there is).
  constexpr int64_t kBlock = 1024;
  float scaled[kBlock];
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t m = std::min(kBlock, n - start);
    if (from.dtype() == DType::f32) {
      const auto* values = static_cast<const float*>(from.data()) + start;
      const float scale = 1.0f / static_cast<float>(world);
      for (int64_t i = 0; i < m; ++i) scaled[i] = values[i] * scale;
    } else if (from.dtype() == DType::f64) {
      const auto* values = static_cast<const double*>(from.data()) + start;
      const double scale = 1.0 / world;
      for (int64_t i = 0; i < m; ++i) scaled[i] = round_to_odd(values[i] * scale);
    } else {
      const auto* values = static_cast<const uint16_t*>(from.data()) + start;
      fp16_to_floats(values, scaled, m);
      const float scale = 1.0f / static_cast<float>(world);
      for (int64_t i = 0; i < m; ++i) scaled[i] *= scale;
    }
    floats_to_fp16(scaled, bits + start, m);
  }
}
void widen_from_fp16(const Tensor& from, const Tensor& out) {
  const auto* bits = static_cast<const uint16_t*>(from.data());
  const int64_t n = out.numel();
  if (out.dtype() == DType::f32) {
    fp16_to_floats(bits, static_cast<float*>(out.data()), n);
  } else if (out.dtype() == DType::f64) {
    auto* values = static_cast<double*>(out.data());
    for (int64_t i = 0; i < n; ++i) values[i] = fp16_to_float(bits[i]);
  } else {
    std::memcpy(out.data(), bits, static_cast<size_t>(n) * sizeof(uint16_t));
  }
}

}  // namespace

CommHook fp16_compress_hook() {
  return [](ProcessGroup& group, GradBucket& bucket) -> std::shared_ptr<Work> {
    const Tensor buffer = bucket.buffer;
    RINGGRAD_CHECK(buffer.dtype() == DType::f32 || buffer.dtype() == DType::f64 || buffer.dtype() == DType::f16,
                   "fp16_compress_hook: expected a float32, float64 or float16 bucket, got ", buffer.dtype());
    const NoGradGuard no_grad;  // gradients are data here, not part of any graph
    // Scaled by 1/N first, then summed -- not averaged after: float16 ends at 65504, and a sum of N
    // gradients can pass that where their average does not (the ring rounds every partial sum to
    // float16 on its way). PyTorch's fp16_compress_hook divides before the sum too (after its cast).
    // Every element is rounded to float16 once: scaled in its bucket's precision, then narrowed.
    const int world = group.size();
    const bool host = buffer.device().is_cpu();
    Tensor compressed;
    if (host) {
      // The host holds float16 but computes nothing in it: the conversion is written out here.
      compressed = empty({buffer.numel()}, DType::f16);
      narrow_to_fp16(buffer, compressed, world);
    } else {
      compressed = mul(buffer, 1.0 / world).to(DType::f16);  // a kernel each; float16 is computed in float
    }
    return widen_when_done(group.all_reduce(compressed, ReduceOp::Sum), buffer, compressed, widen_from_fp16);
  };
}

CommHook comm_hook_named(const std::string& name) {
  if (name == "none" || name == "allreduce") return allreduce_hook();
  if (name == "bf16") return bf16_compress_hook();
  if (name == "fp16") return fp16_compress_hook();
  throw Error(detail::str("comm hook: expected 'none', 'bf16' or 'fp16', got '", name, "'"));
}

}  // namespace parallel
}  // namespace ringgrad
