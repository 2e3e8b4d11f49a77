// core/ops/dropout.cpp: inverted dropout with a counter-based (Philox) mask.
//
// Training: y = x * m, m_i = [u_i >= p] / (1 - p), so E[y] = x and inference needs no rescaling.
// The mask comes from the generator's counters, so one seed gives one mask on every run and
// backend. The backward multiplies by the same saved mask: dx = dy * m.
#include "core/ops/op_utils.h"

namespace ringgrad {
namespace {

struct DropoutBackward final : Node {
  SavedTensor mask;
  const char* name() const override { return "DropoutBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override { return {g[0] * mask.unpack()}; }
};

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator& generator) {
  ops::check_floating("dropout", x);
  RINGGRAD_CHECK(p >= 0.0 && p <= 1.0, "dropout: expected a probability p in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  const Tensor xc = x.contiguous();
  Tensor y = empty_like(xc);
  Tensor mask = empty_like(xc);
  const uint64_t offset = generator.reserve(static_cast<uint64_t>(xc.numel()));
  if (y.numel() > 0)
    ops::backend_of(x, "dropout")
        .dropout(x.dtype(), xc.data(), y.data(), mask.data(), xc.numel(), p, generator.seed(), offset,
                 ops::stream_of(x));
  if (needs_grad(x)) record<DropoutBackward>(y, {x}).mask = save(mask);
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training) { return dropout(x, p, training, default_generator()); }

}  // namespace ringgrad
