// parallel/ring/ring_collectives.h: the ring algorithms, on raw memory, over a RingLink.
//
// N ranks, each holding N chunks of a buffer (chunk c is a pointer and an element count; chunks may
// be empty when the buffer is shorter than N). Two building blocks, each N-1 steps of "send one chunk
// to the next rank while receiving one from the previous":
//
//   reduce-scatter : step s sends chunk (r-1-s) and receives chunk (r-2-s), which it reduces into its
//                    own copy -- the chunk it will send at step s+1. After N-1 steps chunk r holds the
//                    contributions of all N ranks: rank r OWNS chunk r.
//   all-gather     : step s sends chunk (r-s) and receives chunk (r-1-s), which it stores. After N-1
//                    steps every rank has every owner's chunk.
//
// all_reduce = reduce-scatter then all-gather: 2(N-1) steps, and each rank sends 2(N-1)/N of the
// buffer -- the least any all-reduce can send (each rank must get (N-1)/N of the result from others
// and give away (N-1)/N of its data), whatever N is. That is why the ring is bandwidth-optimal.
//
// Every element of chunk c is summed in the same order on every run -- starting at rank c+1's
// copy and going around -- and all ranks then copy the owner's result, so all ranks get bitwise the
// same values, run after run.
#pragma once

#include <cstdint>
#include <vector>

#include <ringgrad/core/base/dtype.h>
#include <ringgrad/parallel/process_group.h>
#include "parallel/ring/link.h"

namespace ringgrad {
namespace parallel {

struct RingStep {
  RingLink* link = nullptr;  // null when size == 1
  // This rank's place on the ring: the "r" of the algorithms above. It is the rank itself unless the
  // ring was ordered host by host (ring_order.h); chunks are then listed in ring order too.
  int position = 0, size = 1;
  uint64_t collective = 0;  // numbers the tags of this collective's messages
  Deadline deadline;
};

struct Chunk {
  uint8_t* data = nullptr;
  int64_t count = 0;  // elements
};

// Splits `count` elements at `data` into `parts` chunks whose sizes differ by at most one.
std::vector<Chunk> split_chunks(void* data, int64_t count, int64_t element_size, int parts);

// dst[i] = op(dst[i], src[i]) for i < count; float32, float64, bfloat16 and float16 (the 16-bit ones
// added in float32, then rounded to nearest even, as NCCL does).
void reduce_into(void* dst, const void* src, int64_t count, DType dtype, ReduceOp op);
// data[i] /= divisor: the last step of an average.
void divide_by(void* data, int64_t count, DType dtype, int divisor);

// The building blocks; `chunks` has one entry per rank. With `average` (op Avg), this rank's own
// chunk comes out divided by the ring's size, not summed: in float32 and float64 its last reduction
// divides as it adds, which saves a pass over the chunk and gives the same bits as dividing after.
void ring_reduce_scatter(const RingStep& ring, const std::vector<Chunk>& chunks, DType dtype, ReduceOp op,
                         bool average = false);
void ring_all_gather(const RingStep& ring, const std::vector<Chunk>& chunks, int64_t element_size);

// In place: every rank ends with op over all ranks of `data` (Avg divides the owner's chunk by N
// before the all-gather, so even the average is bitwise identical everywhere).
void ring_all_reduce(const RingStep& ring, void* data, int64_t count, DType dtype, ReduceOp op);
// Root's bytes to every rank, forwarded around the ring in segments so that all links work at once.
void ring_broadcast(const RingStep& ring, void* data, int64_t bytes, int root);

}  // namespace parallel
}  // namespace ringgrad
