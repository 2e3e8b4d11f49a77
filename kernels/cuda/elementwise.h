// kernels/cuda/elementwise.h: every CUDA elementwise launcher, one header per family -- for the code
// that calls several families (cuda_backend.cpp, the CUDA tests and benchmarks).
//
//   copy.h     fill, arange, strided copy with dtype cast        (copy.cu)
//   unary.h    the ops of kernels/unary_ops.h and their backward  (unary.cu)
//   binary.h   broadcasting add, sub, mul, div                    (binary.cu)
//   random.h   uniform and normal draws, dropout                  (random.cu)
//
// Private to the library and its tests.
#pragma once

#include "kernels/cuda/binary.h"
#include "kernels/cuda/copy.h"
#include "kernels/cuda/random.h"
#include "kernels/cuda/unary.h"
