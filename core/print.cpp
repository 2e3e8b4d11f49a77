// core/print.cpp: prints tensors the way PyTorch does, so output can be compared by eye.
//   tensor([[ 0.1000, -2.0000],
//           [ 3.0000,  4.0000]], dtype=float64, requires_grad=true)
// Tensors with more than 1000 elements show the first and last three entries of each dimension.
#include <cmath>
#include <cstdio>
#include <sstream>

#include <ringgrad/core/autograd/node.h>
#include <ringgrad/core/tensor.h>

namespace ringgrad {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool integer = false;
  bool scientific = false;
  int width = 0;

  std::string format(double v) const {
    char buf[64];
    if (integer)
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    else if (scientific)
      std::snprintf(buf, sizeof buf, "%.4e", v);
    else
      std::snprintf(buf, sizeof buf, "%.4f", v);
    return buf;
  }
};

void print_rec(std::ostream& os, const std::vector<double>& v, const Shape& shape, int64_t dim, int64_t base,
               bool summarize, const Formatter& f, int indent) {
  const Shape strides = contiguous_strides(shape);
  os << '[';
  const int64_t n = shape[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (dim + 1 == shape.size() ? "..., " : "...,\n" + std::string(static_cast<size_t>(indent + 1), ' '));
      i = n - kEdgeItems;
    }
    if (dim + 1 == shape.size()) {
      std::string s = f.format(v[static_cast<size_t>(base + i)]);
      os << std::string(static_cast<size_t>(std::max<int>(0, f.width - static_cast<int>(s.size()))), ' ') << s;
    } else {
      print_rec(os, v, shape, dim + 1, base + i * strides[dim], summarize, f, indent + 1);
    }
    if (i + 1 < n) {
      os << ',';
      if (dim + 1 == shape.size())
        os << ' ';
      else
        os << std::string(static_cast<size_t>(shape.size() - dim - 1), '\n')
           << std::string(static_cast<size_t>(indent + 1), ' ');
    }
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  const Tensor cpu = t.detach().to(Device::cpu(), DType::f64);
  const std::vector<double> v = cpu.to_vector<double>();

  Formatter f;
  f.integer = t.dtype() == DType::i64 || t.dtype() == DType::u8;
  double max_abs = 0, min_abs_nonzero = INFINITY;
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    max_abs = std::max(max_abs, std::fabs(x));
    if (x != 0) min_abs_nonzero = std::min(min_abs_nonzero, std::fabs(x));
  }
  f.scientific = !f.integer && (max_abs >= 1e8 || (min_abs_nonzero < 1e-4 && std::isfinite(min_abs_nonzero)));
  for (double x : v) f.width = std::max<int>(f.width, static_cast<int>(f.format(x).size()));

  os << "tensor(";
  if (t.dim() == 0)
    os << f.format(v[0]);
  else
    print_rec(os, v, t.shape(), 0, 0, t.numel() > kSummarizeAbove, f, 7);
  if (t.numel() == 0) os << ", size=" << t.shape();
  if (t.dtype() != DType::f32 && t.dtype() != DType::i64) os << ", dtype=" << t.dtype();  // PyTorch's defaults
  if (t.device() != Device::cpu(0)) os << ", device=" << t.device();
  if (t.grad_fn())
    os << ", grad_fn=<" << t.grad_fn()->name() << ">";
  else if (t.requires_grad())
    os << ", requires_grad=true";
  return os << ')';
}

std::string to_string(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

}  // namespace ringgrad
