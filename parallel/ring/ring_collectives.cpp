// parallel/ring/ring_collectives.cpp: reduce-scatter, all-gather, all-reduce and broadcast on a ring.
#include "parallel/ring/ring_collectives.h"

#include <algorithm>
#include <cstring>

#include <ringgrad/core/base/bf16.h>
#include <ringgrad/core/base/fp16.h>
#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace parallel {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }
// mod() as an index into a list of one chunk per rank: it is in [0, n), never negative.
size_t slot(int a, int n) { return static_cast<size_t>(mod(a, n)); }

template <typename T>
void reduce_typed(T* __restrict dst, const T* __restrict src, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:  // summed here, divided once at the owner
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
      return;
    case ReduceOp::Min:
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i] < dst[i] ? src[i] : dst[i];
      return;
    case ReduceOp::Max:
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i] > dst[i] ? src[i] : dst[i];
      return;
  }
}

// dst = (dst + src) / divisor: the sum and then divide_by(), bit for bit (two roundings, as there).
template <typename T>
void reduce_average_typed(T* __restrict dst, const T* __restrict src, int64_t n, int divisor) {
  const T d = static_cast<T>(divisor);
  for (int64_t i = 0; i < n; ++i) dst[i] = (dst[i] + src[i]) / d;
}

// reduce_average_typed for float32 and float64, the only dtypes ring_reduce_scatter fuses.
void reduce_average(void* dst, const void* src, int64_t count, DType dtype, int divisor) {
  if (dtype == DType::f32)
    reduce_average_typed(static_cast<float*>(dst), static_cast<const float*>(src), count, divisor);
  else
    reduce_average_typed(static_cast<double*>(dst), static_cast<const double*>(src), count, divisor);
}

// bfloat16 and float16: each pair widened to float32, combined, and rounded back to nearest even.
template <float (*kWiden)(uint16_t), uint16_t (*kNarrow)(float)>
void reduce_16bit(uint16_t* dst, const uint16_t* src, int64_t n, ReduceOp op) {
  for (int64_t i = 0; i < n; ++i) {
    const float a = kWiden(dst[i]), b = kWiden(src[i]);
    float r = a + b;
    if (op == ReduceOp::Min) r = b < a ? b : a;
    if (op == ReduceOp::Max) r = b > a ? b : a;
    dst[i] = kNarrow(r);
  }
}

// float16 a block at a time, so that the conversions go 8 at a time (F16C, where the CPU has it):
// element by element they would cost more than the network at 10 Gbit/s. Same results, bit for bit.
void reduce_fp16(uint16_t* dst, const uint16_t* src, int64_t n, ReduceOp op) {
  constexpr int64_t kBlock = 512;
  float a[kBlock], b[kBlock];
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t m = std::min(kBlock, n - start);
    fp16_to_floats(dst + start, a, m);
    fp16_to_floats(src + start, b, m);
    for (int64_t i = 0; i < m; ++i) {
      float r = a[i] + b[i];
      if (op == ReduceOp::Min) r = b[i] < a[i] ? b[i] : a[i];
      if (op == ReduceOp::Max) r = b[i] > a[i] ? b[i] : a[i];
      a[i] = r;
    }
    floats_to_fp16(a, dst + start, m);
  }
}

template <float (*kWiden)(uint16_t), uint16_t (*kNarrow)(float)>
void divide_16bit(uint16_t* p, int64_t n, int divisor) {
  for (int64_t i = 0; i < n; ++i) p[i] = kNarrow(kWiden(p[i]) / static_cast<float>(divisor));
}

}  // namespace

std::vector<Chunk> split_chunks(void* data, int64_t count, int64_t element_size, int parts) {
  std::vector<Chunk> chunks;
  chunks.reserve(static_cast<size_t>(parts));
  int64_t offset = 0;
  for (int c = 0; c < parts; ++c) {
    const int64_t n = count / parts + (c < count % parts ? 1 : 0);
    chunks.push_back({static_cast<uint8_t*>(data) + offset * element_size, n});
    offset += n;
  }
  return chunks;
}

void reduce_into(void* dst, const void* src, int64_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32: return reduce_typed(static_cast<float*>(dst), static_cast<const float*>(src), count, op);
    case DType::f64: return reduce_typed(static_cast<double*>(dst), static_cast<const double*>(src), count, op);
    case DType::bf16:
      return reduce_16bit<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src),
                                                        count, op);
    case DType::f16: return reduce_fp16(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, op);
    default: throw Error(detail::str("ring: reductions support float32, float64, bfloat16 and float16, got ", dtype));
  }
}

void divide_by(void* data, int64_t count, DType dtype, int divisor) {
  if (dtype == DType::f32) {
    auto* p = static_cast<float*>(data);
    for (int64_t i = 0; i < count; ++i) p[i] /= static_cast<float>(divisor);
  } else if (dtype == DType::f64) {
    auto* p = static_cast<double*>(data);
    for (int64_t i = 0; i < count; ++i) p[i] /= static_cast<double>(divisor);
  } else if (dtype == DType::bf16) {
    divide_16bit<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(data), count, divisor);
  } else if (dtype == DType::f16) {
    divide_16bit<fp16_to_float, float_to_fp16>(static_cast<uint16_t*>(data), count, divisor);
  } else {
    throw Error(detail::str("ring: averages support float32, float64, bfloat16 and float16, got ", dtype));
  }
}

void ring_reduce_scatter(const RingStep& ring, const std::vector<Chunk>& chunks, DType dtype, ReduceOp op,
                         bool average) {
  const int n = ring.size, r = ring.position;
  const int64_t esize = dtype_size(dtype);
  // The last step reduces into this rank's own chunk; in float32 and float64 it divides there too.
  const bool fused = average && op == ReduceOp::Avg && (dtype == DType::f32 || dtype == DType::f64);
  for (int s = 0; s < n - 1; ++s) {
    const bool divide_here = fused && s == n - 2;
    const Chunk& out = chunks[slot(r - 1 - s, n)];
    const Chunk& in = chunks[slot(r - 2 - s, n)];
    // Each piece is reduced the moment it arrives, straight from the transport's buffer, while
    // the rest of the chunk is still on its way.
    const uint64_t tag = make_tag(ring.collective, static_cast<uint32_t>(s));
    ring.link->exchange(
        tag, out.data, static_cast<size_t>(out.count * esize), tag, nullptr, static_cast<size_t>(in.count * esize),
        [&](const uint8_t* data, size_t offset, size_t bytes) {
          const auto ebytes = static_cast<size_t>(esize);
          RINGGRAD_CHECK(offset % ebytes == 0 && bytes % ebytes == 0, "ring: a piece of ", bytes, " bytes at offset ",
                         offset, " does not hold whole ", dtype, " elements");
          const int64_t count = static_cast<int64_t>(bytes) / esize;
          if (divide_here)
            reduce_average(in.data + offset, data, count, dtype, n);
          else
            reduce_into(in.data + offset, data, count, dtype, op);
        },
        ring.deadline);
  }
  const Chunk& own = chunks[static_cast<size_t>(r)];
  if (average && op == ReduceOp::Avg && !fused) divide_by(own.data, own.count, dtype, n);
}

void ring_all_gather(const RingStep& ring, const std::vector<Chunk>& chunks, int64_t element_size) {
  const int n = ring.size, r = ring.position;
  for (int s = 0; s < n - 1; ++s) {
    const Chunk& out = chunks[slot(r - s, n)];
    const Chunk& in = chunks[slot(r - 1 - s, n)];
    // Steps after the reduce-scatter's N-1 are numbered on, so the two phases' tags never collide.
    const uint64_t tag = make_tag(ring.collective, static_cast<uint32_t>(n + s));
    ring.link->exchange(tag, out.data, static_cast<size_t>(out.count * element_size), tag, in.data,
                        static_cast<size_t>(in.count * element_size), nullptr, ring.deadline);
  }
}

void ring_all_reduce(const RingStep& ring, void* data, int64_t count, DType dtype, ReduceOp op) {
  if (ring.size == 1) {
    return;  // one rank: the sum, min, max and average of one value is that value
  }
  const std::vector<Chunk> chunks = split_chunks(data, count, dtype_size(dtype), ring.size);
  ring_reduce_scatter(ring, chunks, dtype, op, /*average=*/true);  // this rank's chunk comes out averaged
  ring_all_gather(ring, chunks, dtype_size(dtype));
}

void ring_broadcast(const RingStep& ring, void* data, int64_t bytes, int root) {
  const int n = ring.size;
  if (n == 1 || bytes == 0) return;
  // The ring starting at root: position 0 only sends, position n-1 only receives, the others pass
  // each segment on while receiving the next one, so after a short start-up every link is busy.
  constexpr int64_t kSegmentBytes = 256 << 10;
  const int position = mod(ring.position - root, n);
  const int64_t segments = (bytes + kSegmentBytes - 1) / kSegmentBytes;
  auto* base = static_cast<uint8_t*>(data);
  auto segment = [&](int64_t i) {
    return std::make_pair(base + i * kSegmentBytes, std::min(kSegmentBytes, bytes - i * kSegmentBytes));
  };
  const bool sends = position != n - 1, receives = position != 0;
  // Iteration i sends segment i-1 (received in the previous iteration; the root sends segment i).
  for (int64_t i = 0; i <= segments; ++i) {
    const int64_t send_index = position == 0 ? i : i - 1;
    const bool send_now = sends && send_index >= 0 && send_index < segments;
    const bool recv_now = receives && i < segments;
    if (!send_now && !recv_now) continue;
    const auto out = send_now ? segment(send_index) : std::make_pair(base, int64_t{0});
    const auto in = recv_now ? segment(i) : std::make_pair(base, int64_t{0});
    // A message's tag is its segment's index, so the receiver of segment k checks for tag k.
    ring.link->exchange(make_tag(ring.collective, static_cast<uint32_t>(send_index < 0 ? 0 : send_index)), out.first,
                        static_cast<size_t>(out.second), make_tag(ring.collective, static_cast<uint32_t>(i)), in.first,
                        static_cast<size_t>(in.second), nullptr, ring.deadline);
  }
}

}  // namespace parallel
}  // namespace ringgrad
