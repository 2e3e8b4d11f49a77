// core/factories.cpp: functions that make new tensors (empty, zeros, arange, rand, from_vector ...).
#include <cmath>
#include <cstring>

#include <ringgrad/core/generator.h>
#include "core/ops/op_utils.h"
#include <ringgrad/core/tensor.h>

namespace ringgrad {
namespace {

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad()) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor empty(const Shape& shape, TensorOptions options) {
  // The byte count must fit in int64 before anything multiplies it out (a corrupt file's header
  // can ask for 2^32 x 2^32 elements).
  int64_t nbytes = dtype_size(options.dtype());
  for (int64_t s : shape) {
    RINGGRAD_CHECK(s >= 0, "empty: expected non-negative sizes, got ", shape);
    RINGGRAD_CHECK(!__builtin_mul_overflow(nbytes, s, &nbytes), "empty: shape ", shape, " of ", options.dtype(),
                   " needs more bytes than fit in int64");
  }
  check_device(options.device(), "empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = options.dtype();
  impl->device = options.device();
  impl->storage = std::make_shared<Storage>(options.device(), nbytes);
  return finish(Tensor(std::move(impl)), options);
}

Tensor full(const Shape& shape, double value, TensorOptions options) {
  const bool requires = options.requires_grad();
  Tensor t = empty(shape, options.requires_grad(false));
  kernels::backend_for(t.device().kind, "full").fill(t.dtype(), t.data(), t.numel(), value, ops::stream_of(t));
  return finish(t, options.requires_grad(requires));
}

Tensor zeros(const Shape& shape, TensorOptions options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  RINGGRAD_CHECK(step != 0.0, "arange: expected a non-zero step, got 0");
  RINGGRAD_CHECK((end - start) / step >= 0, "arange: expected the step ", step, " to go from ", start, " towards ",
                 end);
  const double count = std::ceil((end - start) / step);
  RINGGRAD_CHECK(std::isfinite(count) && count < 4.6e18, "arange: ", start, " to ", end, " by ", step,
                 " has too many elements");
  const auto n = static_cast<int64_t>(count);
  Tensor t = empty({n}, options);
  kernels::backend_for(t.device().kind, "arange").arange(t.dtype(), t.data(), n, start, step, ops::stream_of(t));
  return t;
}

Tensor arange(int64_t end, TensorOptions options) { return arange(0.0, static_cast<double>(end), 1.0, options); }

Tensor empty_like(const Tensor& t) { return empty(t.shape(), TensorOptions(t.dtype()).device(t.device())); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), TensorOptions(t.dtype()).device(t.device())); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), TensorOptions(t.dtype()).device(t.device())); }

namespace {

Tensor random_tensor(const char* op, kernels::RandomKind kind, const Shape& shape, TensorOptions options,
                     Generator& gen) {
  RINGGRAD_CHECK(is_floating(options.dtype()), op, ": expected a floating dtype, got ", options.dtype());
  const bool requires = options.requires_grad();
  Tensor t = empty(shape, options.requires_grad(false));
  const uint64_t offset = gen.reserve(static_cast<uint64_t>(t.numel()));
  kernels::backend_for(t.device().kind, op)
      .random(kind, t.dtype(), t.data(), t.numel(), gen.seed(), offset, /*a=*/0.0, /*b=*/1.0, ops::stream_of(t));
  return finish(t, options.requires_grad(requires));
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions options, Generator& generator) {
  return random_tensor("rand", kernels::RandomKind::Uniform, shape, options, generator);
}
Tensor rand(const Shape& shape, TensorOptions options, uint64_t seed) {
  Generator generator(seed);
  return rand(shape, options, generator);
}
Tensor rand(const Shape& shape, TensorOptions options) { return rand(shape, options, default_generator()); }

Tensor randn(const Shape& shape, TensorOptions options, Generator& generator) {
  return random_tensor("randn", kernels::RandomKind::Normal, shape, options, generator);
}
Tensor randn(const Shape& shape, TensorOptions options, uint64_t seed) {
  Generator generator(seed);
  return randn(shape, options, generator);
}
Tensor randn(const Shape& shape, TensorOptions options) { return randn(shape, options, default_generator()); }

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  RINGGRAD_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: expected ", shape.numel(),
                 " values for shape ", shape, ", got ", values.size());
  Tensor host = empty(shape, TensorOptions(dtype_of<T>::value));
  if (!values.empty()) std::memcpy(host.data(), values.data(), values.size() * sizeof(T));
  return device.is_cpu() && device.index == 0 ? host : host.to(device);
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, Device);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, Device);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, Device);
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, const Shape&, Device);

Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }

}  // namespace ringgrad
