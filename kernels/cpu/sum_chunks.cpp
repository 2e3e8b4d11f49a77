// kernels/cpu/sum_chunks.cpp: sum_lanes.h at 16-byte vectors (SSE: x86-64-v2, the library's own level).
#include "kernels/cpu/sum_lanes.h"

namespace ringgrad {
namespace kernels {
namespace cpu {

double sum_chunks_baseline(const float* x, int64_t n) { return sum_chunks_at<float, 16>(x, n); }
double sum_chunks_baseline(const double* x, int64_t n) { return sum_chunks_at<double, 16>(x, n); }

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
