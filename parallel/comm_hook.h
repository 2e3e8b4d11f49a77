/// @file
/// parallel/comm_hook.h: what DDP does with a bucket of gradients -- PyTorch's communication hooks.
///
/// Once backward has filled a bucket, DDP hands it to its hook, which starts the bucket's
/// communication and returns a Work; once that Work is waited for (at the end of backward), the
/// bucket must hold the average of every rank's gradients. The default hook is one all-reduce
/// (average). A compression hook sends fewer bytes: bf16_compress_hook casts the float32 bucket to
/// bfloat16 (2 bytes an element instead of 4), all-reduces that, and casts the average back -- half
/// the bytes on the wire, for gradients rounded to 8 bits of mantissa. On a link that is the
/// bottleneck a step's communication takes about half as long (docs/multi_host.md measures it).
/// fp16_compress_hook sends the same 2 bytes as IEEE float16: 11 significant bits to bfloat16's 8
/// (10 stored to 7; 8 times finer), but a range of only +-65504, with 6.1e-5 the smallest normal value -- smaller
/// gradients lose precision as subnormals and flush to zero below about 3e-8, larger ones (after
/// the division by the world size) become infinities. bf16 is the safe choice; fp16 the more
/// precise one for gradients known to be in range (PyTorch's fp16_compress_hook has the same caveat).
///
/// @code
///   // every bucket compressed to bfloat16 on the wire
///   auto options = parallel::DDPOptions().comm_hook(parallel::bf16_compress_hook());
///   parallel::DistributedDataParallel<Mlp> ddp(model, pg, options);
///   // or a hook of one's own: here, the default one, counted
///   auto count = std::make_shared<int>(0);
///   auto hook = [count](parallel::ProcessGroup& pg, parallel::GradBucket& bucket) {
///     ++*count;
///     return pg.all_reduce(bucket.buffer, parallel::ReduceOp::Avg);
///   };
/// @endcode
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <ringgrad/core/tensor.h>
#include <ringgrad/parallel/process_group.h>

namespace ringgrad {
namespace parallel {

/// One bucket, as a hook sees it.
struct GradBucket {
  int index = 0;  ///< its position in the layout (0 = the first to be ready, the model's last layers)
  Tensor buffer;  ///< the flat gradients of its parameters, this rank's; the hook leaves the average here
};

/// Starts a bucket's communication; the returned Work, once waited for, has left the average in
/// bucket.buffer. Called on the thread that runs backward, once per bucket per synchronised step,
/// in bucket order.
using CommHook = std::function<std::shared_ptr<Work>(ProcessGroup& group, GradBucket& bucket)>;

/// The default: all_reduce(buffer, ReduceOp::Avg), in place.
CommHook allreduce_hook();
/// float32 or float64 buckets go as bfloat16: cast, all-reduce (average), cast back into the bucket
/// (when the Work is waited for, on the waiting thread). A bfloat16 bucket is all-reduced as it is.
CommHook bf16_compress_hook();
/// float32, float64 or float16 buckets go as float16, as PyTorch's fp16_compress_hook sends them:
/// divided by the world size while rounded to float16 (the division in float32), all-reduced with
/// a sum, cast back into the bucket (when the Work is waited for, on the waiting thread). Dividing
/// before the sum keeps a sum of N in-range gradients from overflowing float16's 65504 on the way.
/// Values beyond float16's range become infinities, and ones at or below 2^-25 zeros.
CommHook fp16_compress_hook();
/// The hook a name selects, for flags: "none" (allreduce_hook), "bf16" (bf16_compress_hook) or
/// "fp16" (fp16_compress_hook); any other name is an Error listing these.
CommHook comm_hook_named(const std::string& name);

/// A Work that runs `then` once `inner` has finished without an error, before its own wait()
/// returns: how a hook does something after its collective (a cast back, a division). The
/// continuation runs in the first wait(), on the waiting thread; is_completed() says that the
/// collective has finished, so read the bucket only after wait() (as DDP does).
std::shared_ptr<Work> then(std::shared_ptr<Work> inner, std::function<void()> then);

}  // namespace parallel
}  // namespace ringgrad
