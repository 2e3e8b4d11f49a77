/// @file
/// parallel/comm.h: moving one batch and one set of parameters between devices, differentiably.
///
/// DataParallel's forward is built from three data movements, each an autograd op whose backward is
/// the opposite movement:
///
/// @code
///   scatter   x  (one device)  -> K chunks (one per device)     backward: gather the chunks' gradients
///   broadcast p  (one device)  -> K copies (one per device)     backward: SUM the copies' gradients
///   gather    K outputs        -> one tensor (one device)       backward: scatter the gradient
/// @endcode
///
/// broadcast's backward is where DataParallel reduces gradients: every replica's weight gradient
/// flows back into one Broadcast node on the source device, which adds them up, so `.grad` lands on
/// the original parameter only. (PyTorch: torch.nn.parallel._functions.Broadcast / ReduceAddCoalesced.)
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include <ringgrad/core/tensor.h>

namespace ringgrad {
namespace parallel {

/// Sizes of the chunks scatter() cuts a batch of `batch` rows into for `devices` devices: balanced
/// (sizes differ by at most one, the larger ones first), and only as many chunks as there are rows
/// when the batch is smaller than the device count.   chunk_sizes(10, 4) == {3, 3, 2, 2}
/// (PyTorch's scatter uses ceil-sized chunks, 3, 3, 3, 1, which leaves the last device idle longer.)
std::vector<int64_t> chunk_sizes(int64_t batch, int64_t devices);

/// Splits x along `dim` by chunk_sizes() and puts chunk i on devices[i]. A chunk that stays on x's
/// device is a view, not a copy. Differentiable: the backward joins the chunks' gradients on x's device.
std::vector<Tensor> scatter(const Tensor& x, const std::vector<Device>& devices, int64_t dim = 0);

/// Concatenates `outputs` (one per device, equal shapes except along `dim`) on `device`.
/// Differentiable: the backward cuts the gradient into the outputs' sizes and sends each piece home.
Tensor gather(const std::vector<Tensor>& outputs, Device device, int64_t dim = 0);

/// Where Broadcast nodes add the time they spend summing replica gradients (DataParallel's
/// "reduce" phase). Thread-safe: nodes of a backward may run on several workers.
class ReduceClock {
 public:
  void add(std::chrono::nanoseconds elapsed);  ///< adds to the total
  std::chrono::nanoseconds take();             ///< returns the total and resets it

 private:
  std::mutex mutex_;
  std::chrono::nanoseconds total_{0};
};

/// One copy of p per device: on p's own device the copy is p's memory itself (no data moves), on the
/// others a dense copy. When p requires grad (and grad mode is on), the copies are outputs of one
/// Broadcast node whose backward sums their gradients on p's device; `clock`, when given, is charged
/// with that summation. devices[i] gets result[i]; p must live on one of them.
std::vector<Tensor> broadcast(const Tensor& p, const std::vector<Device>& devices,
                              std::shared_ptr<ReduceClock> clock = nullptr);

}  // namespace parallel
}  // namespace ringgrad
