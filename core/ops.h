/// @file
/// core/ops.h: every differentiable operation, as a free function.
///
/// Each op checks its arguments, runs the kernel of the input's device and, when grad mode is on and
/// an input requires grad, records the node that computes its backward. Forward and backward of an op
/// live side by side in one file under core/ops/ (the file is named after each group below).
///
/// Shapes: binary ops broadcast as NumPy and PyTorch do (sizes are aligned from the right; a size of 1
/// stretches). Devices must match. Floating dtypes must match (float32 is never widened to float64
/// behind your back); an integer operand -- a uint8 mask, int64 indices -- meets a floating one in the
/// floating dtype, and comparisons and where() promote as PyTorch does (promote_types).
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include <ringgrad/core/base/op_params.h>
#include <ringgrad/core/generator.h>
#include <ringgrad/core/tensor.h>

namespace ringgrad {

// --- binary.cpp: broadcasting arithmetic -----------------------------------------------------------
/// a + b, elementwise with broadcasting (PyTorch's rules); a and b on one device, of one dtype.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);  ///< a - b, broadcasting as add
Tensor mul(const Tensor& a, const Tensor& b);  ///< a * b, broadcasting as add
Tensor div(const Tensor& a, const Tensor& b);  ///< a / b, broadcasting as add
/// Shape that a and b broadcast to; throws naming `op` when they do not.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
/// Sums a gradient of a broadcast shape back down to `shape` (the backward of broadcasting).
Tensor sum_to(const Tensor& grad, const Shape& shape);

// --- unary.cpp: elementwise functions and scalar arithmetic -----------------------------------------
Tensor neg(const Tensor& x);                   ///< -x
Tensor exp(const Tensor& x);                   ///< e^x
Tensor log(const Tensor& x);                   ///< natural logarithm
Tensor sqrt(const Tensor& x);                  ///< square root
Tensor pow(const Tensor& x, double exponent);  ///< x^exponent
Tensor relu(const Tensor& x);                  ///< max(x, 0)
/// Which GELU gelu() computes, as PyTorch's `approximate` argument ("none" or "tanh"): None is the
/// exact one, with erf.
enum class GeluApproximate { None, Tanh };
/// x Phi(x), Phi the standard normal CDF; with GeluApproximate::Tanh, its tanh approximation.
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::None);
Tensor tanh(const Tensor& x);            ///< hyperbolic tangent
Tensor sigmoid(const Tensor& x);         ///< 1 / (1 + e^-x)
Tensor silu(const Tensor& x);            ///< x * sigmoid(x), also called swish
Tensor add(const Tensor& x, double s);   ///< x + s
Tensor mul(const Tensor& x, double s);   ///< x * s
Tensor rdiv(double s, const Tensor& x);  ///< s / x

// --- reduce.cpp: reductions -----------------------------------------------------------------------
Tensor sum(const Tensor& x);  ///< all elements -> 0-d tensor
/// Sum over `dims` (negative dims count from the end; a repeated dim throws); `keepdim` keeps them
/// with size 1.
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& x);  ///< mean of all elements -> 0-d tensor (NaN when empty, as PyTorch)
/// Mean over `dims`, as sum(x, dims, keepdim) divided by the count. Floating x only.
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
/// Maximum over one dimension: values (differentiable; the gradient goes to the first maximum) and
/// the int64 indices of those maxima.
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
/// The int64 indices of max(x, dim, keepdim) (never recorded).
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

// --- matmul.cpp: matrix products --------------------------------------------------------------------
/// PyTorch's matmul: (..., M, K) @ (..., K, N) = (..., M, N), the leading (batch) dims broadcasting
/// against each other; a 1-D a is a row and a 1-D b a column, whose dim leaves the result. Transposed
/// views are passed to the GEMM as flags, not copied; an operand broadcast along some batch dims and
/// not others is expanded into dense memory first.
Tensor matmul(const Tensor& a, const Tensor& b);
/// (B, M, K) @ (B, K, N): matmul without broadcasting, as torch.bmm.
Tensor bmm(const Tensor& a, const Tensor& b);
/// y = x W^T + b for x (..., in), W (out, in), b (out) or undefined: PyTorch's nn.functional.linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
/// linear followed by an activation. With Activation::Relu the bias and the ReLU run in the GEMM's
/// epilogue (one pass over y instead of three) and the backward reads the ReLU mask from y;
/// GeluTanh is applied as a separate gelu() op, whose backward needs the pre-activation.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation);

// --- shape.cpp: joining and splitting ----------------------------------------------------------------
/// Joins a non-empty list of tensors along an existing dim; they must match in every other dim.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
/// Joins a non-empty list of tensors of one shape along a new dim inserted at `dim`.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);  ///< last piece may be smaller
/// Views of at most `chunks` pieces of ceil(n / chunks) along `dim`, as PyTorch (there may be fewer).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// --- indexing.cpp: selecting and adding by int64 index ----------------------------------------------
// Indices must lie in [0, size) of the dimension they index (an Error names the first that does not);
// indices on a GPU are checked on the host, which waits for the GPU once per call. Backward adds are
// deterministic: the same bits on every run, device and thread count.
/// The slices x[..., index[j], ...] along `dim` (index 1-D int64, on x's device): dim's size becomes
/// index.numel(). Backward adds each gradient slice into the row it came from.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
/// Rows of `weight` [num_embeddings, embedding_dim] picked by `indices` (int64, any shape): shape
/// indices.shape + [embedding_dim]. PyTorch's F.embedding(indices, weight, padding_idx): the row
/// `padding_idx` (negative counts from the end) gets no gradient.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);
/// y[i][j][k] = x[index[i][j][k]][j][k] for dim 0 (and so on): index has x's rank and is no longer
/// than x in the other dims; y has index's shape. PyTorch's torch.gather.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
/// A copy of x with src added at the places index names along `dim`:
/// y[index[i][j][k]][j][k] += src[i][j][k] for dim 0 (and so on), contributions to one element added
/// in increasing order of their position along dim. index has x's rank, is no longer than src in any
/// dim and no longer than x outside `dim`. PyTorch's torch.scatter_add (not in place).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// --- compare.cpp: masks, selection and triangles ------------------------------------------------------
// Operands of different dtypes are compared or selected in promote_types(a, b) (core/base/dtype.h);
// a scalar takes the tensor's dtype (float64 when the tensor is integer and the scalar is not whole).
///@{
/// a == b, a != b, a < b, a <= b, a > b, a >= b, broadcasting: a uint8 mask of 0 and 1 (PyTorch's
/// bool), never recorded. NaN compares unequal to everything.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& x, double value);
Tensor ne(const Tensor& x, double value);
Tensor lt(const Tensor& x, double value);
Tensor le(const Tensor& x, double value);
Tensor gt(const Tensor& x, double value);
Tensor ge(const Tensor& x, double value);
///@}
///@{
/// cond ? a : b elementwise, broadcasting all three; cond a uint8 mask. The gradient reaches a where
/// cond holds and b elsewhere. PyTorch's torch.where.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
///@}
/// x with `value` (cast to x's dtype, so -INFINITY works for attention) where the uint8 mask, which
/// broadcasts to x's shape, is 1. Not in place: PyTorch's Tensor.masked_fill.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
/// The lower triangle of the last two dims (j - i <= diagonal kept, the rest 0), as torch.tril.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
/// The upper triangle of the last two dims (j - i >= diagonal kept, the rest 0), as torch.triu.
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// --- attention.cpp: fused attention ------------------------------------------------------------------
/// softmax(scale q k^T) v over the last two dims, as PyTorch's F.scaled_dot_product_attention:
/// q [..., T, d], k [..., S, d], v [..., S, dv] -> [..., T, dv], the leading dims equal in all three.
/// `causal`: query i sees keys j <= i only (top-left aligned, PyTorch's is_causal). `scale` defaults
/// to 1/sqrt(d). One fused op: no [T, S] matrix is stored for the backward, which recomputes the
/// probabilities from one saved number per query row. On CUDA head dims up to 128, float32, bfloat16
/// or float16.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = false,
                                    std::optional<double> scale = std::nullopt);
/// The same with a key padding mask, nn.MultiheadAttention's key_padding_mask: uint8 (what eq..ge
/// make) of shape [..., S], its leading dims q's or 1 where it broadcasts (a [B, 1, S] mask for
/// q [B, H, T, d]); nonzero means that key is padding and no query attends to it. It combines with
/// `causal`, gets no gradient, and reaches the kernels as one byte per key: no [T, S] mask is made.
/// An undefined mask masks nothing. A query whose keys are all masked (all padding, or the padding
/// plus the causal cut) gets output 0 and sends no gradient to q, k or v; PyTorch gives NaN there.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding_mask,
                                    bool causal = false, std::optional<double> scale = std::nullopt);

// --- softmax.cpp -------------------------------------------------------------------------------------
Tensor softmax(const Tensor& x, int64_t dim);      ///< e^x / sum(e^x) along `dim`
Tensor log_softmax(const Tensor& x, int64_t dim);  ///< log(softmax(x, dim)), computed stably

// --- layernorm.cpp ---------------------------------------------------------------------------------
/// Normalises over the last dim: (x - mean) / sqrt(var + eps) * weight + bias, var biased (as PyTorch).
/// weight and bias are (C) or undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// --- loss.cpp ----------------------------------------------------------------------------------------
/// How a loss combines its per-sample values: not at all, their mean, or their sum.
enum class Reduction { None, Mean, Sum };
/// Fused log_softmax + negative log-likelihood: logits (N, C), labels int64 (N) in [0, C).
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, Reduction reduction = Reduction::Mean,
                     double label_smoothing = 0.0);
/// (input - target)^2 elementwise, reduced; target must have input's shape.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

// --- dropout.cpp -------------------------------------------------------------------------------------
///@{
/// Zeroes each element with probability p and scales the rest by 1/(1-p); identity when !training.
/// The mask comes from `generator`, or from the default generator.
Tensor dropout(const Tensor& x, double p, bool training, Generator& generator);
Tensor dropout(const Tensor& x, double p, bool training = true);
///@}

// --- optim.cpp: fused optimizer steps, in place and never recorded by autograd ----------------------
/// One SGD step over a dense parameter and its gradient, exactly PyTorch 1.13's single-tensor rule,
/// in the parameter's dtype (nn/optim's SGD is built on it; so can an optimizer written outside
/// ringgrad). `op` names the caller in errors ("SGD.step"). Checks that param is a dense float tensor
/// and that grad and momentum_buffer have param's shape, dtype and device (momentum_buffer dense too);
/// momentum_buffer may be undefined only when args.momentum == 0.
void sgd_step_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStepArgs& args,
               const char* op = "sgd_step_");
/// One Adam/AdamW step, as sgd_step_ (same checks; exp_avg and exp_avg_sq are the moments).
void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamStepArgs& args, const char* op = "adam_step_");
/// x *= s in the memory x views (dense float x), never recorded: whoever else holds that memory --
/// a DDP bucket a gradient is a view of -- sees the change. What clip_grad_norm_ scales with.
void mul_(const Tensor& x, double s, const char* op = "mul_");

// --- operators ---------------------------------------------------------------------------------------
///@{
/// The arithmetic operators, spelled as the ops above (add, sub, mul, div, neg, rdiv).
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& x, double s) { return add(x, s); }
inline Tensor operator+(double s, const Tensor& x) { return add(x, s); }
inline Tensor operator-(const Tensor& x, double s) { return add(x, -s); }
inline Tensor operator-(double s, const Tensor& x) { return add(neg(x), s); }
inline Tensor operator*(const Tensor& x, double s) { return mul(x, s); }
inline Tensor operator*(double s, const Tensor& x) { return mul(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return mul(x, 1.0 / s); }
inline Tensor operator/(double s, const Tensor& x) { return rdiv(s, x); }
///@}

}  // namespace ringgrad
