// core/autograd/node.cpp: node numbering, gradient edges, and AccumulateGrad.
#include <ringgrad/core/autograd/node.h>

#include <atomic>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

AccumulateGrad::AccumulateGrad(Tensor leaf_tensor) : leaf(std::move(leaf_tensor)) {
  device = leaf.device();
  // Accumulation runs as soon as its gradient is complete: the largest number makes the engine pick
  // it before anything else that is ready, so DDP's hooks fire as early as possible.
  sequence_nr = UINT64_MAX;
}

Tensor Node::claim_input_destination(int /*input_nr*/, double& /*beta*/) { return Tensor(); }

namespace {

// The leaf's gradient destination when it can take the gradient: it still matches the leaf (set_data
// may have moved the leaf since) and .grad is undefined or is the destination itself.
Tensor usable_destination(const Tensor& leaf, const AutogradMeta& meta) {
  const Tensor& dest = meta.grad_destination;
  if (!dest.defined() || dest.dtype() != leaf.dtype() || dest.device() != leaf.device() || dest.shape() != leaf.shape())
    return Tensor();
  if (meta.grad.defined() && !meta.grad.same(dest)) return Tensor();  // the user's own .grad: left alone
  return dest;
}

}  // namespace

Tensor AccumulateGrad::claim_input_destination(int /*input_nr*/, double& beta) {
  AutogradMeta& meta = leaf.autograd_meta();
  if (!meta.hooks.empty()) return Tensor();  // a hook may replace the gradient: it must see it whole
  Tensor dest = usable_destination(leaf, meta);
  if (!dest.defined() || !dest.is_contiguous()) return Tensor();
  beta = meta.grad.defined() ? 1.0 : 0.0;  // undefined .grad: the destination holds an old step's values
  meta.grad = dest;
  written_in_place_ = true;
  return dest;
}

std::vector<Tensor> AccumulateGrad::apply(const std::vector<Tensor>& grad_outputs) {
  Tensor grad = grad_outputs[0];
  // A producer that wrote into the destination delivered an undefined gradient (or only the rest of it,
  // from other uses of the leaf, which is added below): the leaf's gradient is complete all the same.
  const bool written_in_place = written_in_place_;
  written_in_place_ = false;
  if (!grad.defined() && !written_in_place) return {};
  AutogradMeta& meta = leaf.autograd_meta();
  if (grad.defined()) {
    for (const TensorHook& hook : meta.hooks) {
      Tensor replaced = hook(grad);
      if (!replaced.defined()) continue;
      RINGGRAD_CHECK(
          replaced.shape() == leaf.shape() && replaced.dtype() == leaf.dtype() && replaced.device() == leaf.device(),
          "register_hook: a hook returned a gradient of shape ", replaced.shape(), ", ", replaced.dtype(), " on ",
          replaced.device(), " for a leaf of shape ", leaf.shape(), ", ", leaf.dtype(), " on ", leaf.device());
      grad = replaced;
    }
  }
  const bool delivered = grad.same(grad_outputs[0]);  // a hook's tensor may be held by the hook's owner
  if (!grad.defined()) {
    // Everything was written into the destination in place.
  } else if (const Tensor dest = usable_destination(leaf, meta); dest.defined()) {
    // .grad is the owner's memory: copied into when empty, added into in place otherwise.
    dest.copy_(meta.grad.defined() ? add(dest, grad) : grad);
    meta.grad = dest;
  } else if (!meta.grad.defined()) {
    // Take the incoming tensor when nothing else can see it: the engine's buffer and `grad` here
    // are its only handles, no other tensor shares its memory, and it is dense. Otherwise copy --
    // add's backward hands the same tensor to both inputs, and two leaves' .grad must never alias.
    // (PyTorch makes the same test; the copy it avoids is a full pass over every parameter.)
    const bool exclusive = delivered && grad.use_count() <= 2 && grad.storage() && grad.storage().use_count() == 1 &&
                           grad.is_contiguous() && grad.offset() == 0 && !grad.grad_fn() &&
                           grad.storage()->nbytes() == grad.numel() * grad.element_size();
    meta.grad = exclusive ? grad : grad.detach().clone();
  } else {
    meta.grad = add(meta.grad, grad);  // out of place: a .grad someone still holds is never modified
  }
  for (const PostAccumulateHook& hook : meta.post_accumulate_hooks) hook(leaf);
  return {};
}

bool needs_grad(const Tensor& a) { return GradMode::is_enabled() && a.requires_grad(); }
bool needs_grad(const Tensor& a, const Tensor& b) {
  return GradMode::is_enabled() && (a.requires_grad() || (b.defined() && b.requires_grad()));
}
bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor claim_gradient_destination(const Edge& edge, double& beta) {
  return edge.valid() ? edge.node->claim_input_destination(edge.input_nr, beta) : Tensor();
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  return {t.grad_accumulator(), 0};
}

}  // namespace ringgrad
