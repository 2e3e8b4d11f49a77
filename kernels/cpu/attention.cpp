// kernels/cpu/attention.cpp: the CPU's fused attention (kernels/attention.h), as GEMMs on blocks.
//
// Legend: one problem (a batch x head slice) has q [T, d], k [S, d], v [S, dv], out [T, dv]; its
// queries are taken kQueryBlock (Bq) rows at a time, its keys kKeyBlock (Bk) rows at a time.
//
// Budget : per problem 2 T S d FLOPs for the scores and 2 T S dv for the weighted sum (about half of
//          each when causal), and one exp per score; the backward recomputes the scores and adds the
//          products dP = dO V^T, dq, dk and dv: 2 T S (3d + 2dv) FLOPs, 2.5x the forward at d = dv.
//          Memory: q, k, v, out read or written a few times, no T x S matrix (per thread, one
//          Bq x Bk block of scores and one of dP) -- so this is bound by the FLOPs of its products.
// Why blocks: score by score, a dot product does one multiply-add per number it loads, so the
//          vector units wait on loads (and on its chain of adds). A block of Bq queries against Bk keys is a GEMM,
//          which reuses every loaded q row Bk times and every k row Bq times from registers (Eigen's packed kernel) and
//          runs near the core's FMA peak. At 64 x 64 a block of scores is 16 KB (float32), as are the q, k and v blocks
//          at d = 64: all stay in L1/L2 while the softmax passes over the scores, where a whole T x S matrix would not
//          (and is what the fused op exists not to store). The softmax is online across key blocks: a running max and
//          sum per query row, the output block rescaled when the max grows. Causal: key blocks wholly above the
//          diagonal are skipped and the diagonal block is masked inside. Padding keys get a score of -inf, so p = 0 for
//          them.
// Mapping: the forward gives each (problem, query block) to one loop iteration: they are
//          independent. The backward gives each problem to one iteration, because dk and dv sum over
//          all of a problem's query blocks: one thread sums them, block after block, so every output
//          is computed in one fixed order whatever the thread count.
// Measured: scaled_dot_product_attention then sum(out * w).backward(), float32, set_num_threads(1),
//          on a 2-core AVX-512 Xeon VM that other builds shared (medians of 22 runs, 9 rounds): causal q, k, v [16, 4,
//          64, 64] (examples/gpt's attention) 3.8-6.1 ms against 33-67 ms for the dot product per score that this
//          replaced (9x comparing the fastest runs, 3.4 and 31.6 ms); causal [4, 8, 256, 64] 16-26 ms against 252-418
//          ms (15x). About 70 GFLOP/s at T = 64; perf gives Eigen's inner kernel about 40% of the time and its packing
//          of the operands, repeated for every block product, about 20%.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include <ringgrad/kernels/attention.h>
#include "kernels/cpu/eigen_map.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/thread_pool.h"
#include <ringgrad/kernels/unary_ops.h>

namespace ringgrad {
namespace kernels {
namespace cpu {
namespace {

// Smaller blocks skip more of a causal triangle but run each GEMM less efficiently, larger ones the
// reverse. At the two sizes measured above, Bq x Bk = 32 x 32, 32 x 64, 64 x 128 and 128 x 64 were
// all within the run-to-run spread (+-15% on this shared machine) of 64 x 64.
constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 64;

// float32's exponentials are unary_ops.h's vectorised polynomial; float64 keeps libm's accuracy.
using unary_ops::math::exp_nonpositive;

template <typename T>
constexpr T kHidden = -std::numeric_limits<T>::infinity();  // the score of a key a query may not see

// `rows` dense rows of `cols` elements, as a matrix.
template <typename T>
ConstMatrixMap<T> dense(const T* data, int64_t rows, int64_t cols) {
  return ConstMatrixMap<T>(data, rows, cols, Eigen::OuterStride<>(cols));
}
template <typename T>
MatrixMap<T> dense(T* data, int64_t rows, int64_t cols) {
  return MatrixMap<T>(data, rows, cols, Eigen::OuterStride<>(cols));
}

// c = alpha a b, or c += alpha a b when `accumulate`. A product over an empty inner dimension (a head
// or value dim of 0) is 0, and Eigen is not asked to compute one.
template <typename T, typename A, typename B>
void multiply(MatrixMap<T> c, const A& a, const B& b, T alpha, bool accumulate) {
  if (c.size() == 0) return;
  if (a.cols() == 0) {
    if (!accumulate) c.setZero();
    return;
  }
  if (accumulate) {
    c.noalias() += alpha * a * b;
  } else {
    c.noalias() = alpha * a * b;
  }
}

// max and sum over a row in eight independent lanes, so that the loops vectorise (a single running
// sum would be one chain of dependent adds).
template <typename T>
T max_of(const T* x, int64_t n) {
  T lanes[8];
  std::fill(lanes, lanes + 8, kHidden<T>);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) lanes[l] = std::max(lanes[l], x[j + l]);
  for (; j < n; ++j) lanes[0] = std::max(lanes[0], x[j]);
  return *std::max_element(lanes, lanes + 8);
}

template <typename T>
T sum_of(const T* x, int64_t n) {
  T lanes[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += x[j + l];
  for (; j < n; ++j) lanes[0] += x[j];
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// The end of the keys that the query rows [.., i_end) may see: all S, or when causal those up to
// the block's last row. Key blocks from there on are skipped.
int64_t keys_end(const AttentionShape& sh, int64_t i_end) { return sh.causal ? std::min(i_end, sh.kv_len) : sh.kv_len; }

// One problem's inputs: q [T, d], k [S, d], v [S, dv] and its padding row (null: no padding).
template <typename T>
struct Problem {
  const T* q;
  const T* k;
  const T* v;
  const uint8_t* padding;
};

template <typename T>
Problem<T> problem(const T* q, const T* k, const T* v, const KeyPaddingMask& pad, const AttentionShape& sh, int64_t b) {
  return {q + b * sh.q_len * sh.head_dim, k + b * sh.kv_len * sh.head_dim, v + b * sh.kv_len * sh.value_dim,
          pad.row(b)};
}

// A block of query rows [i0, i0 + rows) against a block of keys [j0, j0 + cols).
struct Block {
  int64_t i0, rows, j0, cols;
};

// The thread's working memory: a block of scores (then probabilities), one of dP (the backward's),
// and the forward's running max and sum per query row.
template <typename T>
struct Scratch {
  std::vector<T> scores = std::vector<T>(kQueryBlock * kKeyBlock);
  std::vector<T> dp = std::vector<T>(kQueryBlock * kKeyBlock);
  std::vector<T> row_max = std::vector<T>(kQueryBlock);
  std::vector<T> row_sum = std::vector<T>(kQueryBlock);
};

// scores[r, c] = scale q_(i0 + r) . k_(j0 + c), or -inf where query i0 + r may not see key j0 + c.
template <typename T>
void block_scores(const Problem<T>& pr, const AttentionShape& sh, const Block& bl, T* scores) {
  const int64_t d = sh.head_dim;
  multiply(dense(scores, bl.rows, bl.cols), dense(pr.q + bl.i0 * d, bl.rows, d),
           dense(pr.k + bl.j0 * d, bl.cols, d).transpose(), static_cast<T>(sh.scale), false);
  if (pr.padding != nullptr)
    for (int64_t c = 0; c < bl.cols; ++c)
      if (pr.padding[bl.j0 + c] != 0)
        for (int64_t r = 0; r < bl.rows; ++r) scores[r * bl.cols + c] = kHidden<T>;
  if (sh.causal)  // keys j > i; only the blocks that the diagonal crosses have any
    for (int64_t r = 0; r < bl.rows; ++r)
      for (int64_t c = std::max<int64_t>(0, bl.i0 + r + 1 - bl.j0); c < bl.cols; ++c)
        scores[r * bl.cols + c] = kHidden<T>;
}

// ---- forward ------------------------------------------------------------------------------------

// Turns one row of a block's scores into p = e^(s - m') in place, m' the running max m including
// them, and updates m and the running sum l of e^(s - m); returns e^(m - m'), the factor that
// rescales what was summed against the old max. A row that has seen only hidden keys keeps
// m = -inf and gets p = 0.
template <typename T>
T online_softmax_row(T* s, int64_t cols, T& m, T& l) {
  const T new_max = std::max(m, max_of(s, cols));
  if (new_max == kHidden<T>) {
    std::fill(s, s + cols, T(0));
    return T(1);
  }
  for (int64_t c = 0; c < cols; ++c) s[c] = exp_nonpositive(s[c] - new_max);
  const T factor = exp_nonpositive(m - new_max);
  l = l * factor + sum_of(s, cols);
  m = new_max;
  return factor;
}

// out and lse of the query rows [i0, i0 + rows) of one problem (`out` and `lse` point at row i0).
template <typename T>
void forward_query_block(const Problem<T>& pr, const AttentionShape& sh, int64_t i0, int64_t rows, T* out, T* lse,
                         Scratch<T>& scratch) {
  const int64_t dv = sh.value_dim;
  T* m = scratch.row_max.data();
  T* l = scratch.row_sum.data();
  std::fill(m, m + rows, kHidden<T>);
  std::fill(l, l + rows, T(0));
  std::fill(out, out + rows * dv, T(0));  // the running sum of p v, rescaled with each new max
  for (int64_t j0 = 0, end = keys_end(sh, i0 + rows); j0 < end; j0 += kKeyBlock) {
    const Block bl{i0, rows, j0, std::min(kKeyBlock, end - j0)};
    T* p = scratch.scores.data();
    block_scores(pr, sh, bl, p);
    for (int64_t r = 0; r < rows; ++r) {
      const T factor = online_softmax_row(p + r * bl.cols, bl.cols, m[r], l[r]);
      if (factor != T(1))
        for (int64_t c = 0; c < dv; ++c) out[r * dv + c] *= factor;
    }
    multiply(dense(out, rows, dv), dense(p, rows, bl.cols), dense(pr.v + j0 * dv, bl.cols, dv), T(1), true);
  }
  for (int64_t r = 0; r < rows; ++r) {
    T* out_row = out + r * dv;
    if (l[r] == T(0)) {  // every key it may see is padding: out 0, and lse = +inf makes any p 0
      std::fill(out_row, out_row + dv, T(0));
      lse[r] = std::numeric_limits<T>::infinity();
      continue;
    }
    for (int64_t c = 0; c < dv; ++c) out_row[c] /= l[r];
    lse[r] = m[r] + std::log(l[r]);
  }
}

// Loop iterations (problems or query blocks) per part, so that a part does about kGrain
// multiply-adds of the forward.
int64_t units_grain(const AttentionShape& sh, int64_t rows_per_unit) {
  const int64_t per_unit = std::max<int64_t>(1, rows_per_unit * sh.kv_len * (sh.head_dim + sh.value_dim));
  return std::max<int64_t>(1, kGrain / per_unit);
}

template <typename T>
void forward_typed(const T* q, const T* k, const T* v, const KeyPaddingMask& pad, T* out, T* lse,
                   const AttentionShape& sh) {
  const int64_t blocks = (sh.q_len + kQueryBlock - 1) / kQueryBlock;
  parallel_range(sh.batch * blocks, units_grain(sh, kQueryBlock), [&](int64_t begin, int64_t end) {
    Scratch<T> scratch;
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t b = unit / blocks, i0 = (unit - b * blocks) * kQueryBlock;
      const int64_t row = b * sh.q_len + i0;
      forward_query_block(problem(q, k, v, pad, sh, b), sh, i0, std::min(kQueryBlock, sh.q_len - i0),
                          out + row * sh.value_dim, lse + row, scratch);
    }
  });
}

// ---- backward -----------------------------------------------------------------------------------

// One problem's forward results, incoming gradient, gradients and delta (the backward's scratch).
template <typename T>
struct ProblemGrads {
  const T* out;
  const T* lse;
  const T* dout;
  T* dq;
  T* dk;
  T* dv;
  T* delta;
};

// p = e^(s - lse) in place over a block of scores: the forward's probabilities, recomputed. The
// exponent is <= 0 but for rounding; hidden keys (-inf) and rows that see no key (lse = +inf) get 0.
template <typename T>
void probabilities(T* s, const Block& bl, const T* lse) {
  for (int64_t r = 0; r < bl.rows; ++r) {
    T* row = s + r * bl.cols;
    const T row_lse = lse[bl.i0 + r];
    for (int64_t c = 0; c < bl.cols; ++c) row[c] = exp_nonpositive(std::min(row[c] - row_lse, T(0)));
  }
}

// The gradients' share of one block: with P and dP = dO V^T,
//   dS = P (dP - delta),   dq += scale dS k,   dk += scale dS^T q,   dv += P^T dO.
template <typename T>
void backward_block(const Problem<T>& pr, const ProblemGrads<T>& g, const AttentionShape& sh, const Block& bl,
                    Scratch<T>& scratch) {
  const int64_t d = sh.head_dim, dv = sh.value_dim;
  const T scale = static_cast<T>(sh.scale);
  T* p = scratch.scores.data();
  T* ds = scratch.dp.data();
  block_scores(pr, sh, bl, p);
  probabilities(p, bl, g.lse);
  const auto dout = dense(g.dout + bl.i0 * dv, bl.rows, dv);
  multiply(dense(ds, bl.rows, bl.cols), dout, dense(pr.v + bl.j0 * dv, bl.cols, dv).transpose(), T(1), false);
  for (int64_t r = 0; r < bl.rows; ++r) {
    const T row_delta = g.delta[bl.i0 + r];
    for (int64_t c = 0; c < bl.cols; ++c) ds[r * bl.cols + c] = p[r * bl.cols + c] * (ds[r * bl.cols + c] - row_delta);
  }
  const auto ds_block = dense(static_cast<const T*>(ds), bl.rows, bl.cols);
  multiply(dense(g.dq + bl.i0 * d, bl.rows, d), ds_block, dense(pr.k + bl.j0 * d, bl.cols, d), scale, true);
  multiply(dense(g.dk + bl.j0 * d, bl.cols, d), ds_block.transpose(), dense(pr.q + bl.i0 * d, bl.rows, d), scale, true);
  multiply(dense(g.dv + bl.j0 * dv, bl.cols, dv), dense(static_cast<const T*>(p), bl.rows, bl.cols).transpose(), dout,
           T(1), true);
}

// dq, dk, dv of one problem, query block after query block.
template <typename T>
void backward_problem(const Problem<T>& pr, const ProblemGrads<T>& g, const AttentionShape& sh, Scratch<T>& scratch) {
  const int64_t d = sh.head_dim, dv = sh.value_dim;
  std::fill(g.dq, g.dq + sh.q_len * d, T(0));
  std::fill(g.dk, g.dk + sh.kv_len * d, T(0));
  std::fill(g.dv, g.dv + sh.kv_len * dv, T(0));
  // delta_i = dout_i . out_i: the softmax backward's row term.
  for (int64_t i = 0; i < sh.q_len; ++i) g.delta[i] = dot(g.dout + i * dv, g.out + i * dv, dv);
  for (int64_t i0 = 0; i0 < sh.q_len; i0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, sh.q_len - i0);
    for (int64_t j0 = 0, end = keys_end(sh, i0 + rows); j0 < end; j0 += kKeyBlock)
      backward_block(pr, g, sh, Block{i0, rows, j0, std::min(kKeyBlock, end - j0)}, scratch);
  }
}

template <typename T>
void backward_typed(const T* q, const T* k, const T* v, const KeyPaddingMask& pad, const T* out, const T* lse,
                    const T* dout, T* dq, T* dk, T* dv, T* delta, const AttentionShape& sh) {
  parallel_range(sh.batch, units_grain(sh, sh.q_len), [&](int64_t begin, int64_t end) {
    Scratch<T> scratch;
    for (int64_t b = begin; b < end; ++b) {
      const int64_t rows = b * sh.q_len, keys = b * sh.kv_len;
      const ProblemGrads<T> g{out + rows * sh.value_dim,
                              lse + rows,
                              dout + rows * sh.value_dim,
                              dq + rows * sh.head_dim,
                              dk + keys * sh.head_dim,
                              dv + keys * sh.value_dim,
                              delta + rows};
      backward_problem(problem(q, k, v, pad, sh, b), g, sh, scratch);
    }
  });
}

class CpuAttention final : public AttentionKernels {
 public:
  void forward(DType dt, const void* q, const void* k, const void* v, const KeyPaddingMask& pad, void* out, void* lse,
               const AttentionShape& sh, Stream) const override {
    dispatch_floating("attention", dt, [&](auto zero) {
      using T = decltype(zero);
      forward_typed(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), pad,
                    static_cast<T*>(out), static_cast<T*>(lse), sh);
    });
  }

  void backward(DType dt, const void* q, const void* k, const void* v, const KeyPaddingMask& pad, const void* out,
                const void* lse, const void* dout, void* dq, void* dk, void* dv, void* delta, const AttentionShape& sh,
                Stream) const override {
    dispatch_floating("attention_backward", dt, [&](auto zero) {
      using T = decltype(zero);
      backward_typed(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), pad,
                     static_cast<const T*>(out), static_cast<const T*>(lse), static_cast<const T*>(dout),
                     static_cast<T*>(dq), static_cast<T*>(dk), static_cast<T*>(dv), static_cast<T*>(delta), sh);
    });
  }
};

}  // namespace

RINGGRAD_REGISTER_KERNELS(AttentionKernels, DeviceKind::CPU, CpuAttention);

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
