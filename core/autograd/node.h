// core/autograd/node.h: the backward graph's vertices.
//
// Each differentiable op records one Node. Its apply() takes the gradient w.r.t. the op's output and
// returns one gradient per input; next_edges[i] says where gradient i goes: to the Node that produced
// input i, or to the AccumulateGrad node of a leaf. An invalid edge means "this input needs no grad".
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <ringgrad/core/tensor.h>

namespace ringgrad {

struct Edge {
  std::shared_ptr<Node> node;  // null: the input does not require grad
  int input_nr = 0;            // which of node's gradient inputs this edge feeds
  bool valid() const { return node != nullptr; }
};

struct Node : std::enable_shared_from_this<Node> {
  Node();
  virtual ~Node() = default;

  virtual const char* name() const = 0;
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) = 0;

  std::vector<Edge> next_edges;
  Device device;                      // where the engine runs apply(): the device of the forward's output
  uint64_t sequence_nr;               // creation order; the engine prefers later nodes (reverse of forward)
  std::vector<TensorHook> pre_hooks;  // Tensor::register_hook on the output of this node
  bool released = false;              // a backward without retain_graph ran through this node
};

// Holds a tensor a backward needs. It is stored detached: keeping the output y with its grad_fn
// inside y's own grad_fn would be a reference cycle that is never freed.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t) : tensor_(t.detach()) {}
  const Tensor& unpack() const { return tensor_; }

 private:
  Tensor tensor_;
};

inline SavedTensor save(const Tensor& t) { return SavedTensor(t); }

// Leaves' gradient sink: sums incoming gradients into .grad, then runs post-accumulate hooks.
struct AccumulateGrad final : Node {
  explicit AccumulateGrad(Tensor leaf);
  const char* name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override;
  Tensor leaf;  // strong: the node lives only as long as some graph points at it
};

// True when grad mode is on and any of `inputs` requires grad: the op must record a node.
bool needs_grad(const Tensor& a);
bool needs_grad(const Tensor& a, const Tensor& b);
bool needs_grad(const std::vector<Tensor>& inputs);

// The edge along which a gradient w.r.t. `t` travels (invalid when t needs no grad).
Edge gradient_edge(const Tensor& t);

// Makes `output` the result of a new NodeT whose edges lead to `inputs`, and returns the node so the
// caller can fill in what the backward needs:   record<TanhBackward>(y, {x}).y = save(y);
template <typename NodeT, typename Inputs>
NodeT& record_node(const Tensor& output, const Inputs& inputs) {
  auto node = std::make_shared<NodeT>();
  node->next_edges.reserve(inputs.size());
  for (const Tensor& in : inputs) node->next_edges.push_back(gradient_edge(in));
  node->device = output.device();
  AutogradMeta& meta = output.autograd_meta();
  meta.requires_grad = true;
  meta.grad_fn = node;
  meta.output_nr = 0;
  return *node;
}
template <typename NodeT>
NodeT& record(const Tensor& output, std::initializer_list<Tensor> inputs) {
  return record_node<NodeT>(output, inputs);
}
template <typename NodeT>
NodeT& record(const Tensor& output, const std::vector<Tensor>& inputs) {
  return record_node<NodeT>(output, inputs);
}

}  // namespace ringgrad
