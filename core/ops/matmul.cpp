// core/ops/matmul.cpp: matmul and linear, both on the backend's GEMM.
//
// Shapes: A (M, K) @ B (K, N) = C (M, N); a leading batch dim B is optional.
//   dA = dC @ B^T      dB = A^T @ dC      (for linear y = x W^T + b:  dx = dy W,  dW = dy^T x,  db = sum_rows dy)
// The transposes in the backward are views; the GEMM reads them through its trans flags, so no
// transposed copy is ever made.
#include "core/ops/op_utils.h"

namespace ringgrad {
namespace {

// How the GEMM reads one matrix operand (the last two dims of t, viewed as rows x cols).
struct Operand {
  Tensor tensor;  // keeps a dense copy alive when one was needed
  const void* data = nullptr;
  int64_t ld = 0;
  bool trans = false;
  int64_t batch_stride = 0;
};

// Row-major (stride of cols == 1) and column-major (a transposed view) are read in place;
// anything else is copied to dense memory first.
Operand operand_of(const Tensor& t) {
  Operand op;
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const int64_t s_row = t.stride(-2), s_col = t.stride(-1);
  if ((cols <= 1 || s_col == 1) && (rows <= 1 || s_row >= cols)) {
    op.tensor = t;
    op.ld = rows <= 1 ? std::max<int64_t>(cols, 1) : s_row;
  } else if ((rows <= 1 || s_row == 1) && (cols <= 1 || s_col >= rows)) {
    op.tensor = t;
    op.trans = true;  // stored as cols x rows, row-major
    op.ld = cols <= 1 ? std::max<int64_t>(rows, 1) : s_col;
  } else {
    op.tensor = t.detach().contiguous();
    op.ld = std::max<int64_t>(cols, 1);
  }
  op.data = op.tensor.data();
  op.batch_stride = t.dim() == 3 ? op.tensor.stride(0) : 0;
  if (t.dim() == 3 && t.size(0) == 1) op.batch_stride = 0;
  return op;
}

// c = a @ b for a (.., M, K), b (.., K, N) already checked; c is dense (.., M, N).
// beta = 1 adds the product to what c holds (a gradient written into its leaf's .grad).
void gemm_into(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& bias, const char* name,
               Activation activation = Activation::None, double beta = 0.0) {
  if (c.numel() == 0) return;
  const Operand oa = operand_of(a), ob = operand_of(b);
  kernels::GemmArgs args;
  args.dtype = a.dtype();
  args.m = a.size(-2);
  args.k = a.size(-1);
  args.n = b.size(-1);
  args.a = oa.data;
  args.lda = oa.ld;
  args.trans_a = oa.trans;
  args.b = ob.data;
  args.ldb = ob.ld;
  args.trans_b = ob.trans;
  args.c = c.data();
  args.ldc = std::max<int64_t>(args.n, 1);
  args.batch = c.dim() == 3 ? c.size(0) : 1;
  args.stride_a = oa.batch_stride;
  args.stride_b = ob.batch_stride;
  args.stride_c = args.m * args.n;
  const Tensor dense_bias = bias.defined() ? bias.contiguous() : Tensor();  // alive until the GEMM returns
  args.bias = dense_bias.defined() ? dense_bias.data() : nullptr;
  args.activation = activation;
  args.beta = beta;
  ops::backend_of(a, name).gemm(args, ops::stream_of(c));
}

struct MatmulBackward final : Node {
  SavedTensor a, b;
  const char* name() const override { return "MatmulBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    const Tensor& a0 = a.unpack();
    const Tensor& b0 = b.unpack();
    Tensor grad_a, grad_b;
    if (next_edges[0].valid()) grad_a = matmul(g[0], b0.transpose(-1, -2));
    if (next_edges[1].valid()) {
      if (a0.dim() == 3 && b0.dim() == 2) {
        // b was shared by every batch entry: its gradient sums over the batch, i.e. one GEMM over
        // the batch folded into the rows.
        const int64_t k = a0.size(2), n = g[0].size(2);
        grad_b = matmul(a0.reshape({-1, k}).t(), g[0].reshape({-1, n}));
      } else {
        grad_b = matmul(a0.transpose(-1, -2), g[0]);
      }
    }
    return {grad_a, grad_b};
  }
};

struct LinearBackward final : Node {
  SavedTensor x, weight;    // x is (rows, in), weight (out, in)
  SavedTensor relu_output;  // set when ReLU was fused: dz = dy * (y > 0)
  bool has_bias = false;
  const char* name() const override { return relu_output.unpack().defined() ? "LinearReluBackward" : "LinearBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    Tensor dy = g[0];
    if (const Tensor& y = relu_output.unpack(); y.defined()) {
      const Tensor dense = dy.contiguous();
      dy = empty_like(dense);
      if (dy.numel() > 0)
        ops::backend_of(y, "linear backward")
            .unary_backward(kernels::UnaryOp::Relu, y.dtype(), y.data(), dense.data(), dy.data(), dy.numel(), 0.0,
                            ops::stream_of(y));
    }
    return {next_edges[0].valid() ? matmul(dy, weight.unpack()) : Tensor(),
            next_edges[1].valid() ? weight_gradient(dy) : Tensor(),
            has_bias && next_edges[2].valid() ? sum(dy, {0}) : Tensor()};
  }

  // dW = dy^T x. When the weight's .grad lives in memory its owner provides (DDP's
  // gradient_as_bucket_view), the GEMM writes there itself -- adding with beta = 1 when a gradient is
  // already accumulated -- and the edge gets no tensor: no temporary, no copy into the bucket.
  Tensor weight_gradient(const Tensor& dy) {
    auto* sink = dynamic_cast<AccumulateGrad*>(next_edges[1].node.get());
    double beta = 0.0;
    const Tensor into = sink != nullptr ? sink->grad_destination(beta) : Tensor();
    if (!into.defined()) return matmul(dy.t(), x.unpack());
    RINGGRAD_CHECK(into.is_contiguous() && into.dtype() == dy.dtype() && into.device() == dy.device(),
                   "linear backward: expected the weight's gradient buffer dense, ", dy.dtype(), " on ", dy.device(),
                   ", got ", into.dtype(), " on ", into.device(), " with strides ", into.strides());
    gemm_into(dy.t(), x.unpack(), into, Tensor(), "linear backward", Activation::None, beta);
    return Tensor();
  }
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  ops::check_floating("matmul", a, "a");
  ops::check_floating("matmul", b, "b");
  ops::check_same("matmul", a, b);
  RINGGRAD_CHECK((a.dim() == 2 && b.dim() == 2) || (a.dim() == 3 && (b.dim() == 3 || b.dim() == 2)),
                 "matmul: expected (M, K) @ (K, N), (B, M, K) @ (B, K, N) or (B, M, K) @ (K, N), got a ", a.shape(),
                 " and b ", b.shape());
  RINGGRAD_CHECK(a.size(-1) == b.size(-2), "matmul: expected a.size(-1) == b.size(-2), got a ", a.shape(), " and b ",
                 b.shape());
  RINGGRAD_CHECK(a.dim() == 2 || b.dim() == 2 || a.size(0) == b.size(0), "matmul: expected equal batch sizes, got a ",
                 a.shape(), " and b ", b.shape());
  Shape shape = a.shape();
  shape[shape.size() - 1] = b.size(-1);
  Tensor c = empty(shape, TensorOptions(a.dtype()).device(a.device()));
  gemm_into(a, b, c, Tensor(), "matmul");
  if (needs_grad(a, b)) {
    auto& node = record<MatmulBackward>(c, {a, b});
    if (b.requires_grad()) node.a = save(a);
    if (a.requires_grad()) node.b = save(b);
  }
  return c;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear(x, weight, bias, Activation::None);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation) {
  if (activation == Activation::GeluTanh) return gelu(linear(x, weight, bias), GeluApproximate::Tanh);
  ops::check_floating("linear", x, "x");
  ops::check_floating("linear", weight, "weight");
  ops::check_same("linear", x, weight, "x", "weight");
  RINGGRAD_CHECK(weight.dim() == 2, "linear: expected weight of shape (out_features, in_features), got ",
                 weight.shape());
  RINGGRAD_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: expected x of shape (..., ", weight.size(1),
                 ") to match weight ", weight.shape(), ", got x ", x.shape());
  if (bias.defined()) {
    ops::check_same("linear", weight, bias, "weight", "bias");
    RINGGRAD_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: expected bias of shape [",
                   weight.size(0), "], got ", bias.shape());
  }
  // Rows of any leading shape become one GEMM: (rows, in) @ W^T, with the bias added in the epilogue.
  const Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});
  Tensor y = empty({x2.size(0), weight.size(0)}, TensorOptions(x.dtype()).device(x.device()));
  gemm_into(x2, weight.detach().t(), y, bias, "linear", activation);
  if (needs_grad({x2, weight, bias})) {
    auto& node = record<LinearBackward>(y, {x2, weight, bias});
    node.has_bias = bias.defined();
    if (activation == Activation::Relu) node.relu_output = save(y);
    if (weight.requires_grad()) node.x = save(x2);
    if (x2.requires_grad()) node.weight = save(weight);
  }
  if (x.dim() == 2) return y;
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = weight.size(0);
  return y.reshape(out_shape);
}

}  // namespace ringgrad
