// parallel/collective_args.cpp: the shared argument checks of collective_args.h.
#include "parallel/collective_args.h"

#include <utility>

#include <ringgrad/core/base/error.h>

namespace ringgrad {
namespace parallel {

CollectiveArgs::CollectiveArgs(std::string prefix, int size, DeviceRule device_rule)
    : prefix_(std::move(prefix)), size_(size), device_rule_(std::move(device_rule)) {}

void CollectiveArgs::tensor(const char* op, const Tensor& t, const std::string& what) const {
  RINGGRAD_CHECK(t.defined(), prefix_, op, ": expected a defined tensor for ", what, ", got an undefined one");
  if (device_rule_) device_rule_(prefix_ + op, t, what);
  RINGGRAD_CHECK(t.is_contiguous(), prefix_, op, ": expected a contiguous tensor for ", what, ", got shape ", t.shape(),
                 " with strides ", t.strides(), "; pass t.contiguous() and copy the result back");
}

void CollectiveArgs::reducible(const char* op, const Tensor& t, const std::string& what) const {
  tensor(op, t, what);
  const DType dt = t.dtype();
  RINGGRAD_CHECK(dt == DType::f32 || dt == DType::f64 || dt == DType::bf16 || dt == DType::f16, prefix_, op,
                 ": expected float32, float64, bfloat16 or float16 for ", what, ", got ", dt);
}

void CollectiveArgs::root(const char* op, int root) const {
  RINGGRAD_CHECK(root >= 0 && root < size_, prefix_, op, ": expected a root rank in 0..", size_ - 1, ", got ", root);
}

void CollectiveArgs::one_per_rank(const char* op, const std::vector<Tensor>& tensors, const char* each,
                                  const Tensor& reference, const char* reference_name) const {
  RINGGRAD_CHECK(static_cast<int>(tensors.size()) == size_, prefix_, op, ": expected ", size_, " ", each,
                 " tensors (one per rank), got ", tensors.size());
  for (size_t r = 0; r < tensors.size(); ++r) {
    const Tensor& t = tensors[r];
    const std::string what = detail::str(each, " ", r);
    tensor(op, t, what);
    RINGGRAD_CHECK(t.shape() == reference.shape() && t.dtype() == reference.dtype() && t.device() == reference.device(),
                   prefix_, op, ": expected ", what, " to be ", reference.shape(), " ", reference.dtype(), " on ",
                   reference.device(), " like ", reference_name, ", got ", t.shape(), " ", t.dtype(), " on ",
                   t.device());
  }
}

std::string describe_collective(const char* op, const Tensor& t, const std::string& extra) {
  return detail::str(op, "(", extra, extra.empty() ? "" : ", ", t.numel(), " x ", t.dtype(), " on ", t.device(), ")");
}

std::string broken_group_message(const std::string& description, int rank, const std::string& first_failure) {
  return detail::str(description, " on rank ", rank,
                     ": the process group is broken by an earlier failure: ", first_failure);
}

}  // namespace parallel
}  // namespace ringgrad
