/// @file
/// core/autograd/node.h: the backward graph's vertices.
///
/// Each differentiable op records one Node. Its apply() takes the gradient w.r.t. the op's output and
/// returns one gradient per input; next_edges[i] says where gradient i goes: to the Node that produced
/// input i, or to the AccumulateGrad node of a leaf. An invalid edge means "this input needs no grad".
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <ringgrad/core/base/error.h>
#include <ringgrad/core/tensor.h>

namespace ringgrad {

/// One input of a Node in the backward graph: the node that receives the gradient, and which of its
/// inputs it is.
struct Edge {
  std::shared_ptr<Node> node;                     ///< null: the input does not require grad
  int input_nr = 0;                               ///< which of node's gradient inputs this edge feeds
  bool valid() const { return node != nullptr; }  ///< false when the input does not require grad
};

/// A backward function in the autograd graph ("TanhBackward"): it receives the gradients w.r.t. the
/// outputs of its forward op and returns the gradients w.r.t. its inputs, one per next_edges entry.
/// Ops create nodes with record(); the engine (engine.h) runs apply() on the node's device.
struct Node : std::enable_shared_from_this<Node> {
  Node();  ///< takes the next sequence_nr
  virtual ~Node() = default;

  virtual const char* name() const = 0;  ///< "TanhBackward": for messages and anomaly reports
  /// The backward: gradients w.r.t. the forward's inputs (undefined for inputs that need none).
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) = 0;

  /// A Tensor::register_hook on output `output_nr` of this node: it runs on that output's gradient
  /// just before apply().
  struct OutputHook {
    int output_nr = 0;
    TensorHook hook;
  };

  std::vector<Edge> next_edges;  ///< where each input's gradient goes, in the forward's input order
  Device device;                 ///< where the engine runs apply(): the device of the forward's outputs
  uint64_t sequence_nr;          ///< creation order; the engine prefers later nodes (reverse of forward)
  /// How many results the forward made (record_outputs): apply() gets one gradient for each, an
  /// undefined one for a result that no gradient reached.
  int num_outputs = 1;
  std::vector<OutputHook> pre_hooks;  ///< Tensor::register_hook on the outputs of this node
  bool released = false;              ///< a backward without retain_graph ran through this node

  /// Where a producer may write the gradient for input `input_nr` of this node itself, and with
  /// which `beta` (0: overwrite, 1: add to what is there). Undefined (the default): it must be
  /// returned from apply() as usual. See claim_gradient_destination().
  virtual Tensor claim_input_destination(int input_nr, double& beta);
};

/// Holds a tensor a backward needs. It is stored detached: keeping the output y with its grad_fn
/// inside y's own grad_fn would be a reference cycle that is never freed.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t) : tensor_(t.detach()) {}  ///< stores t detached
  const Tensor& unpack() const { return tensor_; }                ///< the saved (detached) tensor

 private:
  Tensor tensor_;
};

inline SavedTensor save(const Tensor& t) { return SavedTensor(t); }  ///< SavedTensor(t), to read well in ops

/// Leaves' gradient sink: sums incoming gradients into .grad, then runs post-accumulate hooks.
struct AccumulateGrad final : Node {
  explicit AccumulateGrad(Tensor leaf);  ///< the sink of `leaf` (Tensor::grad_accumulator makes it)
  const char* name() const override { return "AccumulateGrad"; }
  /// Runs the leaf's gradient hooks on grad_outputs[0], adds the result into leaf's .grad (or sets it
  /// when undefined; with a gradient destination, copies or adds it there), then runs the
  /// post-accumulate hooks -- also when a producer wrote the whole gradient in place.
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override;
  Tensor leaf;  ///< strong: the node lives only as long as some graph points at it

  /// A leaf with a gradient destination (Tensor::set_grad_destination) whose .grad is undefined or is
  /// that destination: hands it out (beta 0 when .grad is undefined, 1 when it is accumulated there)
  /// and makes it .grad. Undefined when a gradient hook has to see the gradient first.
  Tensor claim_input_destination(int input_nr, double& beta) override;

 private:
  bool written_in_place_ = false;  // claim_input_destination() handed the destination out in this backward
};

///@{
/// True when grad mode is on and any of `inputs` requires grad: the op must record a node.
bool needs_grad(const Tensor& a);
bool needs_grad(const Tensor& a, const Tensor& b);
bool needs_grad(const std::vector<Tensor>& inputs);
///@}

/// The edge along which a gradient w.r.t. `t` travels (invalid when t needs no grad).
Edge gradient_edge(const Tensor& t);

/// For a backward that can compute a gradient straight into given memory (a GEMM's output): the
/// dense tensor to write the gradient for `edge` into, with `beta` (0: overwrite, 1: add to it), or
/// undefined when the gradient must be returned as usual. A defined answer is a promise: the caller
/// writes the whole gradient there and returns an undefined gradient for that edge. Today only a
/// leaf with a gradient destination (Tensor::set_grad_destination) hands one out.
Tensor claim_gradient_destination(const Edge& edge, double& beta);

/// Makes `output` the result of a new NodeT whose edges lead to `inputs`, and returns the node so the
/// caller can fill in what the backward needs:   record<TanhBackward>(y, {x}).y = save(y);
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
///@{
/// record_node for a braced list or a vector of inputs: what ops call.
template <typename NodeT>
NodeT& record(const Tensor& output, std::initializer_list<Tensor> inputs) {
  return record_node<NodeT>(output, inputs);
}
template <typename NodeT>
NodeT& record(const Tensor& output, const std::vector<Tensor>& inputs) {
  return record_node<NodeT>(output, inputs);
}
///@}

/// record for a forward with several results: outputs[i] becomes result i of one new NodeT, whose
/// apply() then receives one gradient per result, in that order -- an undefined one for a result
/// that no gradient reached (unused, or not differentiable, as an index output). Every output must
/// be on the device of the first.
template <typename NodeT>
NodeT& record_outputs(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs) {
  RINGGRAD_CHECK(!outputs.empty(), "record_outputs: expected at least one output, got none");
  NodeT& node = record_node<NodeT>(outputs[0], inputs);
  node.num_outputs = static_cast<int>(outputs.size());
  for (size_t i = 1; i < outputs.size(); ++i) {
    RINGGRAD_CHECK(outputs[i].device() == node.device, "record_outputs (", node.name(), "): expected output ", i,
                   " on ", node.device, " like output 0, got ", outputs[i].device());
    AutogradMeta& meta = outputs[i].autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node.shared_from_this();
    meta.output_nr = static_cast<int>(i);
  }
  return node;
}

}  // namespace ringgrad
