/// @file
/// parallel/bucket_assignment.h: which parameters share a DDP bucket -- a pure function of their
/// sizes, dtypes and the caps, kept apart from the Reducer so that the layout can be tested (and
/// reasoned about) without a process group, hooks or tensors.
///
/// The rules, as PyTorch's DDP:
/// @code
///   - parameters are taken in REVERSE registration order: backward produces the last layer's
///     gradients first, so the first bucket is ready earliest and its all-reduce overlaps the rest;
///   - a bucket closes once its bytes reach its cap -- so it may pass the cap by its last parameter,
///     and a parameter larger than the cap closes the bucket it joins -- or when the next parameter's
///     dtype differs (a bucket is one flat buffer of one dtype);
///   - the first bucket has a cap of its own (smaller, so communication starts early); a cap of 0
///     for the other buckets puts every parameter in a bucket of its own.
/// @endcode
/// Devices are not split: the Reducer requires every parameter on one device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <ringgrad/core/base/dtype.h>

namespace ringgrad {
namespace parallel {

/// What assign_buckets needs to know of a parameter.
struct BucketParam {
  int64_t bytes = 0;         ///< numel x element size
  DType dtype = DType::f32;  ///< a bucket holds parameters of one dtype
};

/// Bucket b holds the indices (into `params`, registration order) of its parameters, in the order
/// their gradients are expected. Every parameter is in exactly one bucket; no bucket is empty.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParam>& params, int64_t first_bucket_cap_bytes,
                                                int64_t bucket_cap_bytes);

/// A cap given in MiB (DDPOptions) as bytes, rounded up: a bucket of whole bytes reaches a cap of
/// 104.9 bytes exactly when it reaches 105. Caps past int64 are int64's largest value.
int64_t bucket_cap_bytes_from_mb(double mb);

}  // namespace parallel
}  // namespace ringgrad
