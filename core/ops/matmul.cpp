// core/ops/matmul.cpp: matmul, bmm and linear, all on the backend's GEMM.
//
// Shapes, as PyTorch's matmul: A (..., M, K) @ B (..., K, N) = C (..., M, N), where the leading
// (batch) dims broadcast against each other -- (2, 1, M, K) @ (3, K, N) is (2, 3, M, N). A 1-D A is
// a row (1, K) and a 1-D B a column (K, 1); the dim they add is dropped from C.
//   dA = dC @ B^T      dB = A^T @ dC      (for linear y = x W^T + b:  dx = dy W,  dW = dy^T x,  db = sum_rows dy)
// summed over the batch dims an operand was broadcast along (sum_to). The transposes in the backward
// are views; the GEMM reads them through its trans flags, so no transposed copy is ever made.
//
// The GEMM walks a batch with one stride per operand. A broadcast operand has stride 0 there, and a
// dense one rows * cols; an operand whose batch dims cannot be walked with one stride -- broadcast
// along one batch dim but not another, as A above -- is expanded into dense memory first, which is
// what PyTorch's matmul does too (expand, then reshape).
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

// The stride between consecutive matrices when the first `batch_dims` dims of t are walked as one,
// in *stride; false when no single stride does it. Dims of size 1 never move.
bool one_batch_stride(const Tensor& t, int64_t batch_dims, int64_t* stride) {
  *stride = 0;
  int64_t next = -1;  // the stride the next outer dim needs; -1 before the first dim that moves
  for (int64_t i = batch_dims - 1; i >= 0; --i) {
    if (t.size(i) == 1) continue;
    if (next >= 0 && t.stride(i) != next) return false;
    if (next < 0) *stride = t.stride(i);
    next = t.stride(i) * t.size(i);
  }
  return true;
}

// Row-major (stride of cols == 1) and column-major (a transposed view) are read in place;
// anything else is copied to dense memory first. The first `batch_dims` dims are the batch.
Operand operand_of(const Tensor& t_in, int64_t batch_dims) {
  Operand op;
  int64_t batch_stride = 0;
  // A batch no single stride walks: dense first (its matrices then lie rows * cols apart).
  const Tensor t = one_batch_stride(t_in, batch_dims, &batch_stride) ? t_in : t_in.detach().contiguous();
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
  RINGGRAD_CHECK(one_batch_stride(op.tensor, batch_dims, &op.batch_stride), "matmul: a dense copy of ", t.shape(),
                 " has strides ", op.tensor.strides());
  return op;
}

// c = a @ b for a (batch..., M, K), b (batch..., K, N) with the same batch dims (expanded views),
// already checked; c is dense (batch..., M, N). beta = 1 adds the product to what c holds (a gradient
// written into its leaf's .grad).
void gemm_into(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& bias, const char* name,
               Activation activation = Activation::None, double beta = 0.0) {
  if (c.numel() == 0) return;
  const int64_t batch_dims = c.dim() - 2;
  const Operand oa = operand_of(a, batch_dims), ob = operand_of(b, batch_dims);
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
  args.batch = c.numel() / (args.m * args.n);
  args.stride_a = oa.batch_stride;
  args.stride_b = ob.batch_stride;
  args.stride_c = args.m * args.n;
  const Tensor dense_bias = bias.defined() ? bias.contiguous() : Tensor();  // alive until the GEMM returns
  args.bias = dense_bias.defined() ? dense_bias.data() : nullptr;
  args.activation = activation;
  args.beta = beta;
  ops::backend_of(a, name).gemm(args, ops::stream_of(c));
}

// The gradient a @ b (2-D, already the shape of the input it is for) that travels along `edge`. When
// that input is a leaf whose gradient has a destination (Tensor::set_grad_destination: DDP's bucket
// slot), the GEMM writes it there itself -- adding with beta = 1 when a gradient is already
// accumulated -- and the edge gets no tensor: no temporary, no copy. Otherwise the product is returned.
Tensor gradient_gemm(const Tensor& a, const Tensor& b, const Edge& edge, const char* name) {
  double beta = 0.0;
  const Tensor into = claim_gradient_destination(edge, beta);
  if (!into.defined()) return matmul(a, b);
  gemm_into(a, b, into, Tensor(), name, Activation::None, beta);
  return Tensor();
}

struct MatmulBackward final : Node {
  SavedTensor a, b;
  const char* name() const override { return "MatmulBackward"; }
  Shape a_shape, b_shape;  // a and b are at least 2-D here (matmul() promotes 1-D operands)
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    const Tensor& a0 = a.unpack();
    const Tensor& b0 = b.unpack();
    Tensor grad_a, grad_b;
    if (next_edges[0].valid()) {
      if (a_shape.size() == 2 && b_shape.size() == 2)
        grad_a = gradient_gemm(g[0], b0.t(), next_edges[0], "matmul backward");
      else
        grad_a = sum_to(matmul(g[0], b0.transpose(-1, -2)), a_shape);
    }
    if (next_edges[1].valid()) {
      if (b_shape.size() == 2) {
        // With a batch, b was shared by every batch entry: its gradient sums over the batch, i.e. one
        // GEMM over the batch folded into the rows.
        const int64_t k = a_shape.back(), n = g[0].size(-1);
        const bool batched = a_shape.size() >= 3;
        grad_b = gradient_gemm((batched ? a0.reshape({-1, k}) : a0).t(), batched ? g[0].reshape({-1, n}) : g[0],
                               next_edges[1], "matmul backward");
      } else {
        grad_b = sum_to(matmul(a0.transpose(-1, -2), g[0]), b_shape);
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
    return {next_edges[0].valid() ? gradient_gemm(dy, weight.unpack(), next_edges[0], "linear backward") : Tensor(),
            next_edges[1].valid() ? gradient_gemm(dy.t(), x.unpack(), next_edges[1], "linear backward") : Tensor(),
            has_bias && next_edges[2].valid() ? sum(dy, {0}) : Tensor()};
  }
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  ops::check_floating("matmul", a, "a");
  ops::check_floating("matmul", b, "b");
  ops::check_same("matmul", a, b);
  RINGGRAD_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: expected tensors of at least one dimension, got a ", a.shape(),
                 " and b ", b.shape());
  const int64_t a_inner = a.size(-1), b_inner = b.dim() == 1 ? b.size(0) : b.size(-2);
  RINGGRAD_CHECK(a_inner == b_inner, "matmul: expected a.size(-1) == b.size(", b.dim() == 1 ? "0" : "-2", "), got a ",
                 a.shape(), " and b ", b.shape());
  // A vector is a one-row (or one-column) matrix whose extra dim leaves the result again.
  if (a.dim() == 1 || b.dim() == 1) {
    const Tensor c = matmul(a.dim() == 1 ? a.reshape({1, a_inner}) : a, b.dim() == 1 ? b.reshape({b_inner, 1}) : b);
    Shape shape = c.shape();
    if (b.dim() == 1) shape.erase(shape.size() - 1);                       // N
    if (a.dim() == 1) shape.erase(shape.size() - (b.dim() == 1 ? 1 : 2));  // M
    return c.reshape(shape);
  }

  // The batch dims broadcast; the matrices do not.
  Shape a_batch(a.shape().begin(), a.shape().end() - 2), b_batch(b.shape().begin(), b.shape().end() - 2);
  Shape batch = a_batch;
  if (!(a_batch == b_batch)) {
    const int64_t dims = std::max(a_batch.size(), b_batch.size());
    batch = Shape();
    for (int64_t i = 0; i < dims; ++i) {
      const int64_t x = i < dims - a_batch.size() ? 1 : a_batch[i - (dims - a_batch.size())];
      const int64_t y = i < dims - b_batch.size() ? 1 : b_batch[i - (dims - b_batch.size())];
      RINGGRAD_CHECK(x == y || x == 1 || y == 1, "matmul: expected batch dims that broadcast, got a ", a.shape(),
                     " and b ", b.shape());
      batch.push_back(x == 1 ? y : x);
    }
  }
  auto expanded = [&batch](const Tensor& t) {
    Shape shape = batch;
    shape.push_back(t.size(-2));
    shape.push_back(t.size(-1));
    return t.shape() == shape ? t.detach() : t.detach().expand(shape);
  };
  Shape shape = batch;
  shape.push_back(a.size(-2));
  shape.push_back(b.size(-1));
  Tensor c = empty(shape, TensorOptions(a.dtype()).device(a.device()));
  gemm_into(expanded(a), expanded(b), c, Tensor(), "matmul");
  if (needs_grad(a, b)) {
    auto& node = record<MatmulBackward>(c, {a, b});
    node.a_shape = a.shape();
    node.b_shape = b.shape();
    if (b.requires_grad()) node.a = save(a);
    if (a.requires_grad()) node.b = save(b);
  }
  return c;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  RINGGRAD_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0),
                 "bmm: expected (B, M, K) @ (B, K, N) with the same B, got a ", a.shape(), " and b ", b.shape());
  return matmul(a, b);
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
