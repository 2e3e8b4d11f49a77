// kernels/cpu/sum_chunks_avx512.cpp: sum_lanes.h at 64-byte vectors (AVX-512: compiled with -march=x86-64-v4
// (CMakeLists.txt)).
#include "kernels/cpu/sum_lanes.h"

namespace ringgrad {
namespace kernels {
namespace cpu {

double sum_chunks_avx512(const float* x, int64_t n) { return sum_chunks_at<float, 64>(x, n); }
double sum_chunks_avx512(const double* x, int64_t n) { return sum_chunks_at<double, 64>(x, n); }

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
