// kernels/cpu/sum_chunks.h: the inner loop of every CPU sum, once per vector level (isa.h).
//
// sum_chunks_*(x, n) cuts x[0 .. n) into chunks of kSumChunk elements from x[0] on (the last one
// shorter), sums each chunk in the element type with the lane scheme of sum_lanes.h, and adds the
// chunk sums in order into a double. The three versions perform the same additions in the same
// order -- only the register width differs -- so they return the same bits; reduce.cpp picks one
// with cpu_isa(). Only declarations here: the _avx2/_avx512 files may include this header.
#pragma once

#include <cstdint>

namespace ringgrad {
namespace kernels {
namespace cpu {

// Elements per chunk. With 64 float lanes each lane adds 16 elements, so a float chunk sum has
// every element pass through at most 15 + 6 = 21 roundings (sum_lanes.h derives the bound).
constexpr int64_t kSumChunk = 1024;

double sum_chunks_baseline(const float* x, int64_t n);
double sum_chunks_baseline(const double* x, int64_t n);
double sum_chunks_avx2(const float* x, int64_t n);
double sum_chunks_avx2(const double* x, int64_t n);
double sum_chunks_avx512(const float* x, int64_t n);
double sum_chunks_avx512(const double* x, int64_t n);

}  // namespace cpu
}  // namespace kernels
}  // namespace ringgrad
