// kernels/cpu/sum_chunks_avx2.cpp: sum_lanes.h at 32-byte vectors (AVX2: compiled with -march=x86-64-v3
// (CMakeLists.txt)).
#include "kernels/cpu/sum_lanes.h"

namespace ringgrad {
namespace kernels {
namespace cpu {

double sum_chunks_avx2(const float* x, int64_t n) { return sum_chunks_at<float, 32>(x, n); }
double sum_chunks_avx2(const double* x, int64_t n) { return sum_chunks_at<double, 32>(x, n); }

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
