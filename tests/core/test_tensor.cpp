// tests/core/test_tensor.cpp: the Tensor handle -- factories, random numbers, conversions, views that
// share storage, copies, dtype and device moves, printing; plus Shape and Device.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <ringgrad/core/device.h>
#include <ringgrad/core/generator.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/shape.h>
#include <ringgrad/core/tensor.h>

#include "test_util.h"

using namespace ringgrad;
using Catch::Contains;

namespace {

// 0, 1, 2, ... as float64 in the given shape.
Tensor iota(const Shape& shape) {
  std::vector<double> v(shape.numel());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return from_vector(v, shape);
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / v.size();
}

}  // namespace

// ============================================= Shape ============================================

TEST_CASE("Shape: numel, comparison, printing and row-major strides", "[tensor]") {
  const Shape s{3, 4, 5};
  CHECK(s.size() == 3);
  CHECK(s.numel() == 60);
  CHECK(Shape{}.numel() == 1);  // a scalar has one element
  CHECK(Shape{3, 0, 5}.numel() == 0);
  CHECK(s == Shape{3, 4, 5});
  CHECK(s != Shape{3, 5, 4});
  CHECK(contiguous_strides(s) == Shape{20, 5, 1});
  CHECK(contiguous_strides(Shape{3, 0, 5}) == Shape{5, 5, 1});
  std::ostringstream os;
  os << s;
  CHECK(os.str() == "[3, 4, 5]");
  CHECK(s.vec() == std::vector<int64_t>{3, 4, 5});
  Shape t = s;
  t.insert(1, 7);
  CHECK(t == Shape{3, 7, 4, 5});
  t.erase(0);
  CHECK(t == Shape{7, 4, 5});
}

TEST_CASE("Shape: more than kMaxDims dimensions throws", "[tensor]") {
  Shape s;
  for (int i = 0; i < kMaxDims; ++i) s.push_back(1);
  CHECK_THROWS_AS(s.push_back(1), Error);
}

// ============================================= Device ===========================================

TEST_CASE("Device::parse reads cpu, cpu:k, cuda and cuda:k", "[tensor]") {
  CHECK(Device::parse("cpu") == Device::cpu(0));
  CHECK(Device::parse("cpu:3") == Device::cpu(3));
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:7") == Device::cuda(7));
  CHECK(Device::cpu(2).str() == "cpu:2");
  CHECK(Device::cuda(1).str() == "cuda:1");
  CHECK(Device::parse(Device::cpu(1).str()) == Device::cpu(1));
  CHECK(Device::cpu(0) != Device::cuda(0));
  CHECK(Device::cpu(0) < Device::cpu(1));
}

TEST_CASE("Device::parse rejects malformed names", "[tensor]") {
  for (const char* bad : {"gpu:0", "cpu:", "cpu:-1", "cpu:1x", "CPU", "", "cuda:a"}) {
    INFO("parsing '" << bad << "'");
    CHECK_THROWS_AS(Device::parse(bad), Error);
  }
}

// =========================================== factories ==========================================

TEST_CASE("factories: empty has the requested shape, dtype and device", "[tensor]") {
  Tensor t = empty({3, 5}, DType::f64);
  CHECK(t.shape() == Shape{3, 5});
  CHECK(t.dtype() == DType::f64);
  CHECK(t.device() == Device::cpu(0));
  CHECK(t.is_contiguous());
  CHECK(t.strides() == Shape{5, 1});
  CHECK(t.numel() == 15);
  CHECK(t.dim() == 2);
  CHECK(t.element_size() == 8);
  CHECK_FALSE(t.requires_grad());
  CHECK(empty({2, 3}).dtype() == DType::f32);  // float32 by default
  CHECK(empty({0, 3}).numel() == 0);
  Tensor on1 = empty({2}, Device::cpu(1));
  CHECK(on1.device() == Device::cpu(1));
  CHECK(on1.storage()->device() == Device::cpu(1));
  Tensor rg = empty({2}, TensorOptions(DType::f64).requires_grad(true));
  CHECK(rg.requires_grad());
  CHECK(rg.is_leaf());
}

TEST_CASE("factories: zeros, ones and full fill every element", "[tensor]") {
  CHECK(zeros({3, 5}, DType::f64).to_vector<double>() == std::vector<double>(15, 0.0));
  CHECK(ones({5, 3}).to_vector<float>() == std::vector<float>(15, 1.0f));
  CHECK(full({2, 7}, 2.5, DType::f64).to_vector<double>() == std::vector<double>(14, 2.5));
  CHECK(full({3}, 7.0, DType::i64).to_vector<int64_t>() == std::vector<int64_t>{7, 7, 7});
  CHECK(zeros({4}, DType::u8).to_vector<uint8_t>() == std::vector<uint8_t>(4, 0));
  Tensor x = randn({3, 5}, DType::f64, 1);
  CHECK(zeros_like(x).shape() == x.shape());
  CHECK(zeros_like(x).dtype() == DType::f64);
  CHECK(ones_like(x).to_vector<double>() == std::vector<double>(15, 1.0));
  CHECK(empty_like(x).shape() == Shape{3, 5});
  Tensor on2 = zeros({3}, Device::cpu(2));
  CHECK(on2.device() == Device::cpu(2));
  CHECK(on2.to_vector<float>() == std::vector<float>(3, 0.0f));
}

TEST_CASE("factories: arange counts from start by step, excluding end", "[tensor]") {
  CHECK(arange(5, DType::i64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(0.5, 3.0, 0.5, DType::f64).to_vector<double>() == std::vector<double>{0.5, 1.0, 1.5, 2.0, 2.5});
  CHECK(arange(1.0, 2.0, 0.3, DType::f64).numel() == 4);  // 1.0 1.3 1.6 1.9
  Tensor a = arange(7);
  CHECK(a.shape() == Shape{7});
  CHECK(a.to(DType::f64).to_vector<double>() == std::vector<double>{0, 1, 2, 3, 4, 5, 6});
}

TEST_CASE("rand: uniform values in (0, 1) with mean near 1/2", "[tensor]") {
  const std::vector<double> v = rand({100, 101}, DType::f64, 3).to_vector<double>();
  for (double x : v) REQUIRE((x >= 0.0 && x < 1.0));
  CHECK(mean_of(v) == Approx(0.5).margin(0.01));
  const std::vector<float> f = rand({7, 3}, DType::f32, 3).to_vector<float>();
  for (float x : f) REQUIRE((x >= 0.0f && x < 1.0f));
}

TEST_CASE("randn: standard normal values (mean near 0, std near 1)", "[tensor]") {
  const std::vector<double> v = randn({100, 101}, DType::f64, 4).to_vector<double>();
  const double m = mean_of(v);
  double var = 0;
  for (double x : v) var += (x - m) * (x - m);
  var /= v.size();
  CHECK(m == Approx(0.0).margin(0.03));
  CHECK(std::sqrt(var) == Approx(1.0).margin(0.03));
  for (double x : v) REQUIRE(std::isfinite(x));
}

TEST_CASE("rand and randn: the same seed gives the same values, another seed different ones", "[tensor]") {
  CHECK(rand({3, 5}, DType::f64, 7).to_vector<double>() == rand({3, 5}, DType::f64, 7).to_vector<double>());
  CHECK(randn({3, 5}, DType::f32, 7).to_vector<float>() == randn({3, 5}, DType::f32, 7).to_vector<float>());
  CHECK(rand({3, 5}, DType::f64, 7).to_vector<double>() != rand({3, 5}, DType::f64, 8).to_vector<double>());
  CHECK(randn({3, 5}, DType::f64, 7).to_vector<double>() != randn({3, 5}, DType::f64, 8).to_vector<double>());
  manual_seed(11);
  const std::vector<float> a = randn({4, 3}).to_vector<float>();
  manual_seed(11);
  CHECK(randn({4, 3}).to_vector<float>() == a);
  // The same seed gives the same values on another logical device.
  CHECK(rand({3, 5}, TensorOptions(DType::f64).device(Device::cpu(1)), 7).to_vector<double>() ==
        rand({3, 5}, DType::f64, 7).to_vector<double>());
}

TEST_CASE("Generator: draws advance the offset and resetting the state repeats them", "[tensor]") {
  Generator g(5);
  CHECK(g.seed() == 5);
  CHECK(g.offset() == 0);
  const std::vector<double> first = rand({3, 5}, DType::f64, g).to_vector<double>();
  CHECK(g.offset() == 15);
  const std::vector<double> second = rand({3, 5}, DType::f64, g).to_vector<double>();
  CHECK(first != second);
  g.manual_seed(5);
  CHECK(rand({3, 5}, DType::f64, g).to_vector<double>() == first);
  g.set_state(5, 15);
  CHECK(rand({3, 5}, DType::f64, g).to_vector<double>() == second);
  // A Generator(seed) starts where an explicit seed does.
  Generator h(9);
  CHECK(randn({7}, DType::f64, h).to_vector<double>() == randn({7}, DType::f64, 9).to_vector<double>());
}

TEST_CASE("Generator: element i depends only on (seed, offset + i), so draws can be split", "[tensor]") {
  Generator whole(21), parts(21);
  const std::vector<double> all = rand({10}, DType::f64, whole).to_vector<double>();
  std::vector<double> joined = rand({4}, DType::f64, parts).to_vector<double>();
  const std::vector<double> rest = rand({6}, DType::f64, parts).to_vector<double>();
  joined.insert(joined.end(), rest.begin(), rest.end());
  CHECK(joined == all);

  Generator nwhole(22), nparts(22);
  const std::vector<double> nall = randn({9}, DType::f64, nwhole).to_vector<double>();
  std::vector<double> njoined = randn({5}, DType::f64, nparts).to_vector<double>();
  const std::vector<double> nrest = randn({4}, DType::f64, nparts).to_vector<double>();
  njoined.insert(njoined.end(), nrest.begin(), nrest.end());
  CHECK(njoined == nall);
}

// ====================================== vectors and scalars =====================================

TEST_CASE("from_vector and to_vector round-trip every dtype", "[tensor]") {
  Tensor f = from_vector<float>({1.5f, -2.0f, 3.25f, 4.0f, 5.0f, 6.0f}, {2, 3});
  CHECK(f.dtype() == DType::f32);
  CHECK(f.shape() == Shape{2, 3});
  CHECK(f.to_vector<float>() == std::vector<float>{1.5f, -2.0f, 3.25f, 4.0f, 5.0f, 6.0f});
  Tensor d = from_vector<double>({0.1, 0.2, 0.3});
  CHECK(d.dtype() == DType::f64);
  CHECK(d.shape() == Shape{3});
  CHECK(d.to_vector<double>() == std::vector<double>{0.1, 0.2, 0.3});
  Tensor i = from_vector<int64_t>({-5, 0, 9000000000LL});
  CHECK(i.dtype() == DType::i64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{-5, 0, 9000000000LL});
  Tensor u = from_vector<uint8_t>({0, 128, 255}, {3, 1});
  CHECK(u.dtype() == DType::u8);
  CHECK(u.to_vector<uint8_t>() == std::vector<uint8_t>{0, 128, 255});
  Tensor on3 = from_vector<double>({1, 2, 3, 4}, {2, 2}, Device::cpu(3));
  CHECK(on3.device() == Device::cpu(3));
  CHECK(on3.to_vector<double>() == std::vector<double>{1, 2, 3, 4});
}

TEST_CASE("from_vector with a shape that does not match the element count throws", "[tensor]") {
  CHECK_THROWS_AS(from_vector<float>({1, 2, 3}, {2, 2}), Error);
}

TEST_CASE("to_vector of a non-contiguous view gives its elements in row-major order", "[tensor]") {
  Tensor x = iota({2, 3});  // [[0 1 2] [3 4 5]]
  CHECK(x.t().to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(x.narrow(1, 1, 2).to_vector<double>() == std::vector<double>{1, 2, 4, 5});
  CHECK(x.select(1, 2).to_vector<double>() == std::vector<double>{2, 5});
  CHECK(x.narrow(0, 1, 1).expand({3, 3}).to_vector<double>() == std::vector<double>{3, 4, 5, 3, 4, 5, 3, 4, 5});
}

TEST_CASE("item returns the value of a one-element tensor", "[tensor]") {
  CHECK(scalar_tensor(3.5).item() == 3.5);
  CHECK(scalar_tensor(-2.25, DType::f64).item<double>() == -2.25);
  CHECK(full({1, 1}, 4.0, DType::i64).item<int64_t>() == 4);
  CHECK(from_vector<float>({7.5f}).item<float>() == 7.5f);
  CHECK(iota({3, 5}).select(0, 2).select(0, 3).item() == 13.0);
}

TEST_CASE("scalar_tensor is 0-d with one element", "[tensor]") {
  Tensor s = scalar_tensor(2.0, DType::f64);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.shape() == Shape{});
  CHECK(s.dtype() == DType::f64);
  CHECK(scalar_tensor(1.0).dtype() == DType::f32);
}

// ======================================= views share storage ====================================

TEST_CASE("view and reshape of a contiguous tensor share storage, -1 is inferred", "[tensor]") {
  Tensor x = iota({2, 3, 4});
  Tensor v = x.view({4, 6});
  CHECK(v.shape() == Shape{4, 6});
  CHECK(v.storage() == x.storage());
  Tensor r = x.reshape({-1, 6});
  CHECK(r.shape() == Shape{4, 6});
  CHECK(r.storage() == x.storage());
  CHECK(x.reshape({3, -1}).shape() == Shape{3, 8});
  CHECK(x.view({-1}).shape() == Shape{24});
  v.data<double>()[7] = 100.0;  // v[1, 1] is x's element 7
  CHECK(x.to_vector<double>()[7] == 100.0);
  CHECK(r.to_vector<double>()[7] == 100.0);
}

TEST_CASE("reshape of a non-contiguous tensor copies, with the right values", "[tensor]") {
  Tensor x = iota({2, 3});
  Tensor r = x.t().reshape({6});
  CHECK(r.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK(r.is_contiguous());
  CHECK(r.storage() != x.storage());
}

// PyTorch's rule: a view may split or merge dims only within runs of dims that follow each other
// in memory, so some non-contiguous tensors have views (and reshape then returns one).
TEST_CASE("view of a non-contiguous tensor follows PyTorch's stride rules", "[tensor]") {
  const Tensor x = iota({2, 3, 4});
  const Tensor t = x.transpose(0, 1);         // [3, 2, 4], strides [4, 12, 1]
  const Tensor split = t.view({3, 2, 2, 2});  // the last dim split: within one run
  CHECK(split.storage() == x.storage());
  CHECK(split.strides() == Shape{4, 12, 2, 1});
  CHECK(split.contiguous().to_vector<double>() == t.contiguous().to_vector<double>());
  CHECK_ERROR(t.view({3, 8}), "view", "[3, 2, 4]", "[4, 12, 1]", "[3, 8]", "reshape");  // would merge two runs
  const Tensor merged = t.reshape({3, 8});                                              // so reshape copies
  CHECK(merged.storage() != x.storage());
  CHECK(merged.to_vector<double>() == t.contiguous().to_vector<double>());

  const Tensor chunk = iota({4, 6}).narrow(1, 0, 3);  // [4, 3], strides [6, 1]: rows of a wider matrix
  const Tensor rows = chunk.view({2, 2, 3});
  CHECK(rows.strides() == Shape{12, 6, 1});
  CHECK(rows.contiguous().to_vector<double>() == chunk.contiguous().to_vector<double>());
  CHECK(chunk.reshape({2, 2, 3}).storage() == chunk.storage());  // a view, not a copy
  CHECK_ERROR(chunk.view({12}), "view", "reshape");
  CHECK(chunk.view({4, 3, 1}).strides()[1] == 1);
  CHECK(iota({1}).view({}).dim() == 0);
  CHECK(iota({0, 3}).t().view({3, 0, 1}).shape() == Shape{3, 0, 1});
}

TEST_CASE("transpose, t and permute share storage and permute the strides", "[tensor]") {
  Tensor x = iota({3, 4});
  Tensor y = x.t();
  CHECK(y.shape() == Shape{4, 3});
  CHECK(y.strides() == Shape{1, 4});
  CHECK(y.storage() == x.storage());
  CHECK_FALSE(y.is_contiguous());
  CHECK(x.transpose(0, 1).strides() == Shape{1, 4});
  CHECK(x.transpose(-1, -2).shape() == Shape{4, 3});

  Tensor z = iota({2, 3, 4});
  Tensor p = z.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK(p.storage() == z.storage());
  // p[i, j, k] == z[j, k, i]
  CHECK(p.select(0, 3).select(0, 1).select(0, 2).item() == 1 * 12 + 2 * 4 + 3);
}

TEST_CASE("narrow, slice with step and select share storage with an offset", "[tensor]") {
  Tensor x = iota({3, 5});
  Tensor n = x.narrow(1, 1, 3);
  CHECK(n.shape() == Shape{3, 3});
  CHECK(n.offset() == 1);
  CHECK(n.strides() == Shape{5, 1});
  CHECK(n.storage() == x.storage());
  CHECK(n.to_vector<double>() == std::vector<double>{1, 2, 3, 6, 7, 8, 11, 12, 13});

  Tensor s = x.slice(1, 0, 5, 2);
  CHECK(s.shape() == Shape{3, 3});
  CHECK(s.strides() == Shape{5, 2});
  CHECK(s.to_vector<double>() == std::vector<double>{0, 2, 4, 5, 7, 9, 10, 12, 14});
  CHECK(x.slice(0, 1, 3).to_vector<double>() == std::vector<double>{5, 6, 7, 8, 9, 10, 11, 12, 13, 14});
  CHECK(x.slice(1, 1, 5, 3).to_vector<double>() == std::vector<double>{1, 4, 6, 9, 11, 14});

  Tensor r = x.select(0, 2);
  CHECK(r.shape() == Shape{5});
  CHECK(r.offset() == 10);
  CHECK(r.to_vector<double>() == std::vector<double>{10, 11, 12, 13, 14});
  CHECK(x.select(-1, 4).to_vector<double>() == std::vector<double>{4, 9, 14});

  n.data<double>()[0] = -1.0;  // n[0, 0] is x[0, 1]
  CHECK(x.to_vector<double>()[1] == -1.0);
  r.data<double>()[2] = -2.0;  // r[2] is x[2, 2]
  CHECK(x.to_vector<double>()[12] == -2.0);
}

TEST_CASE("expand broadcasts with stride 0, new dims go in front, -1 keeps a size", "[tensor]") {
  Tensor x = iota({3, 1});
  Tensor e = x.expand({3, 4});
  CHECK(e.shape() == Shape{3, 4});
  CHECK(e.strides()[1] == 0);
  CHECK(e.storage() == x.storage());
  CHECK(e.to_vector<double>() == std::vector<double>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2});
  Tensor f = x.expand({2, -1, 5});
  CHECK(f.shape() == Shape{2, 3, 5});
  CHECK(f.strides()[0] == 0);
  CHECK(f.numel() == 30);
}

TEST_CASE("squeeze and unsqueeze add and remove size-1 dims, sharing storage", "[tensor]") {
  Tensor x = iota({3, 1, 5, 1});
  CHECK(x.squeeze().shape() == Shape{3, 5});
  CHECK(x.squeeze(1).shape() == Shape{3, 5, 1});
  CHECK(x.squeeze(-1).shape() == Shape{3, 1, 5});
  CHECK(x.squeeze(0).shape() == Shape{3, 1, 5, 1});  // size 3: unchanged, as in PyTorch
  CHECK(x.squeeze().storage() == x.storage());
  Tensor y = iota({3, 5});
  CHECK(y.unsqueeze(0).shape() == Shape{1, 3, 5});
  CHECK(y.unsqueeze(1).shape() == Shape{3, 1, 5});
  CHECK(y.unsqueeze(-1).shape() == Shape{3, 5, 1});
  CHECK(y.unsqueeze(2).shape() == Shape{3, 5, 1});
  CHECK(y.unsqueeze(1).storage() == y.storage());
  CHECK(y.unsqueeze(1).to_vector<double>() == y.to_vector<double>());
  CHECK(scalar_tensor(1.0).unsqueeze(0).shape() == Shape{1});
}

TEST_CASE("flatten merges a range of dims", "[tensor]") {
  Tensor x = iota({2, 3, 4});
  CHECK(x.flatten().shape() == Shape{24});
  CHECK(x.flatten(1).shape() == Shape{2, 12});
  CHECK(x.flatten(0, 1).shape() == Shape{6, 4});
  CHECK(x.flatten(-2, -1).shape() == Shape{2, 12});
  CHECK(x.flatten().storage() == x.storage());
  CHECK(x.transpose(0, 2).flatten().to_vector<double>() == x.transpose(0, 2).contiguous().to_vector<double>());
}

TEST_CASE("size and stride accept negative dims", "[tensor]") {
  Tensor x = empty({3, 4, 5});
  CHECK(x.size(-1) == 5);
  CHECK(x.size(0) == 3);
  CHECK(x.size(-3) == 3);
  CHECK(x.stride(-1) == 1);
  CHECK(x.stride(0) == 20);
}

// ============================================ copies ============================================

TEST_CASE("contiguous returns the same tensor when dense and a dense copy otherwise", "[tensor]") {
  Tensor x = iota({3, 5});
  Tensor c = x.contiguous();
  CHECK(c.storage() == x.storage());
  Tensor t = x.t();
  Tensor tc = t.contiguous();
  CHECK(tc.is_contiguous());
  CHECK(tc.storage() != x.storage());
  CHECK(tc.shape() == Shape{5, 3});
  CHECK(tc.to_vector<double>() == t.to_vector<double>());
  CHECK(tc.strides() == Shape{3, 1});
}

TEST_CASE("clone copies the data into new storage", "[tensor]") {
  Tensor x = iota({3, 5});
  Tensor c = x.clone();
  CHECK(c.storage() != x.storage());
  CHECK(c.to_vector<double>() == x.to_vector<double>());
  c.data<double>()[0] = 42.0;
  CHECK(x.to_vector<double>()[0] == 0.0);
  Tensor nc = x.narrow(1, 1, 2).clone();
  CHECK(nc.is_contiguous());
  CHECK(nc.to_vector<double>() == std::vector<double>{1, 2, 6, 7, 11, 12});
}

TEST_CASE("copy_ between overlapping views of one storage reads the source as it was", "[tensor]") {
  // Shifting right and left by one (the source and destination overlap in all but one element), a
  // transpose of a square matrix into itself, and a copy onto itself.
  Tensor x = arange(int64_t{10}, DType::f64);
  x.narrow(0, 1, 9).copy_(x.narrow(0, 0, 9));
  CHECK(x.to_vector<double>() == std::vector<double>{0, 0, 1, 2, 3, 4, 5, 6, 7, 8});
  Tensor y = arange(int64_t{10}, DType::f64);
  y.narrow(0, 0, 9).copy_(y.narrow(0, 1, 9));
  CHECK(y.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 9});
  Tensor m = arange(int64_t{9}, DType::f32).reshape({3, 3});
  m.copy_(m.t());
  CHECK(m.to_vector<float>() == std::vector<float>{0, 3, 6, 1, 4, 7, 2, 5, 8});
  m.copy_(m);
  CHECK(m.to_vector<float>() == std::vector<float>{0, 3, 6, 1, 4, 7, 2, 5, 8});
  // Views that share a storage but no element are copied directly.
  Tensor z = arange(int64_t{6}, DType::i64);
  z.narrow(0, 3, 3).copy_(z.narrow(0, 0, 3));
  CHECK(z.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 0, 1, 2});
}

TEST_CASE("copy_ into a view that repeats elements (expand) is refused", "[tensor]") {
  Tensor x = zeros({3}, DType::f32);
  Tensor repeated = x.narrow(0, 0, 1).expand({4, 1});
  CHECK_THROWS_WITH(repeated.copy_(ones({4, 1})),
                    Contains("copy_: expected a destination whose elements are distinct") && Contains("dimension 0"));
  CHECK(x.to_vector<float>() == std::vector<float>{0, 0, 0});
}

TEST_CASE("to(dtype) converts values, float to int truncates toward zero", "[tensor]") {
  Tensor d = from_vector<double>({1.5, -2.75, 3.0, 2.7, -2.7, 0.0}, {2, 3});
  Tensor f = d.to(DType::f32);
  CHECK(f.dtype() == DType::f32);
  CHECK(f.shape() == Shape{2, 3});
  CHECK(f.to_vector<float>() == std::vector<float>{1.5f, -2.75f, 3.0f, 2.7f, -2.7f, 0.0f});
  CHECK(d.to(DType::i64).to_vector<int64_t>() == std::vector<int64_t>{1, -2, 3, 2, -2, 0});
  CHECK(from_vector<int64_t>({3, -4}).to(DType::f64).to_vector<double>() == std::vector<double>{3.0, -4.0});
  CHECK(from_vector<uint8_t>({0, 200}).to(DType::f32).to_vector<float>() == std::vector<float>{0.0f, 200.0f});
  // A non-contiguous source converts element by element in logical order.
  CHECK(d.t().to(DType::f32).to_vector<float>() == std::vector<float>{1.5f, 2.7f, -2.75f, -2.7f, 3.0f, 0.0f});
}

TEST_CASE("to(device) copies between logical CPU devices", "[tensor]") {
  REQUIRE(cpu_device_count() >= 2);
  Tensor x = iota({3, 5});
  Tensor y = x.to(Device::cpu(1));
  CHECK(y.device() == Device::cpu(1));
  CHECK(y.storage()->device() == Device::cpu(1));
  CHECK(y.storage() != x.storage());
  CHECK(y.to_vector<double>() == x.to_vector<double>());
  Tensor back = y.to(Device::cpu(0));
  CHECK(back.device() == Device::cpu(0));
  CHECK(back.to_vector<double>() == x.to_vector<double>());
  // A non-contiguous view moves with its logical order.
  CHECK(x.t().to(Device::cpu(1)).to_vector<double>() == x.t().to_vector<double>());
  // Device and dtype at once.
  Tensor z = x.to(Device::cpu(1), DType::f32);
  CHECK(z.device() == Device::cpu(1));
  CHECK(z.dtype() == DType::f32);
  CHECK(z.to_vector<float>()[14] == 14.0f);
}

// =========================================== printing ===========================================

TEST_CASE("printing shows the values, dtype and requires_grad in PyTorch's style", "[tensor]") {
  Tensor x = from_vector<double>({1.0, 2.5, -3.0, 4.0, 5.0, 6.0}, {2, 3});
  const std::string s = to_string(x);
  INFO(s);
  CHECK_THAT(s, Contains("tensor("));
  CHECK_THAT(s, Contains("[["));
  CHECK_THAT(s, Contains("2.5"));
  CHECK_THAT(s, Contains("-3"));
  CHECK_THAT(s, Contains("dtype=float64"));
  CHECK_THAT(s, !Contains("requires_grad"));
  std::ostringstream os;
  os << x;
  CHECK(os.str() == s);

  x.requires_grad_(true);
  CHECK_THAT(to_string(x), Contains("requires_grad=true"));
}

TEST_CASE("printing a transposed tensor shows its logical order", "[tensor]") {
  Tensor x = from_vector<double>({1.0, 2.5, -3.0, 4.0, 5.0, 6.0}, {2, 3});
  const std::string s = to_string(x.t());  // [[1, 4], [2.5, 5], [-3, 6]]
  INFO(s);
  CHECK(s.find("4.") < s.find("2.5"));
  CHECK(s.find("5.") < s.find("-3"));
}

TEST_CASE("printing empty, 0-d and integer tensors works", "[tensor]") {
  CHECK_THAT(to_string(zeros({0, 3}, DType::f64)), Contains("tensor("));
  CHECK_THAT(to_string(scalar_tensor(2.5, DType::f64)), Contains("2.5"));
  CHECK_THAT(to_string(from_vector<int64_t>({3, -7})), Contains("-7"));
  CHECK_THAT(to_string(full({2}, 1.0, DType::u8)), Contains("dtype=uint8"));
}

TEST_CASE("printing shows a non-default device, a grad_fn, and summarizes large tensors", "[tensor]") {
  REQUIRE(cpu_device_count() >= 2);
  CHECK_THAT(to_string(ones({2}, Device::cpu(1))), Contains("device=cpu:1"));
  Tensor x = ones({2}, DType::f64).requires_grad_(true);
  CHECK_THAT(to_string(x * 2.0), Contains("grad_fn=<"));
  const std::string big = to_string(arange(0.0, 2000.0, 1.0, DType::f64));
  INFO(big);
  CHECK_THAT(big, Contains("..."));
  CHECK(big.size() < 200);
  CHECK_THAT(big, Contains("1999"));
}
