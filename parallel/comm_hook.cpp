// parallel/comm_hook.cpp: the built-in communication hooks, and Work::then.
#include <ringgrad/parallel/comm_hook.h>

#include <mutex>
#include <utility>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/base/bf16.h>
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
    auto work = group.all_reduce(compressed, ReduceOp::Avg);
    return then(std::move(work), [buffer, compressed, host] {
      const NoGradGuard no_grad_here;
      if (host)
        widen_from_bf16(compressed, buffer);
      else
        buffer.copy_(compressed);  // back to the bucket's dtype
    });
  };
}

CommHook comm_hook_named(const std::string& name) {
  if (name == "none" || name == "allreduce") return allreduce_hook();
  if (name == "bf16") return bf16_compress_hook();
  RINGGRAD_CHECK(name != "fp16",
                 "comm hook 'fp16': ringgrad's tensors have no float16 yet; 'bf16' compresses to the same 2 bytes an "
                 "element (with float32's range and 8 bits of mantissa)");
  throw Error(detail::str("comm hook: expected 'none' or 'bf16', got '", name, "'"));
}

}  // namespace parallel
}  // namespace ringgrad
