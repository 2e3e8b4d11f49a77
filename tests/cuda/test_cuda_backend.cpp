// tests/cuda/test_cuda_backend.cpp: every function of the CUDA backend, called through the Backend
// interface exactly as core/ calls it (backend_for(CUDA), the backend's own stream, memory from the
// caching allocator), agrees with the CPU backend on the same inputs.
//
// Inputs are seeded host tensors copied to cuda:0; each GPU output starts as NaN (all elements), so
// an element the kernel forgets to write fails. Sizes are odd: 1, 7, 33, 129, 1000. Tolerances:
// 0 where both sides do the same IEEE operations, a few ulp where CUDA's math library or FMA
// contraction differ from libm, more where sums are ordered differently.
// Label `cuda`: these tests FAIL without a GPU, except the host-only checks at the end.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <ringgrad/core/cuda.h>
#include <ringgrad/core/ops.h>
#include "core/ops/op_utils.h"
#include <ringgrad/core/tensor.h>
#include <ringgrad/kernels/backend.h>
#include "kernels/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "test_util.h"

using namespace ringgrad;
using namespace ringgrad::kernels;
using ringgrad::test::check_close;
using ringgrad::test::poisoned;
using ringgrad::test::require_gpu;
using ringgrad::test::seeded_host;

namespace {

const Device kGpu = Device::cuda(0);

Backend& cpu() { return backend_for(DeviceKind::CPU, "test"); }
Backend& gpu() { return backend_for(DeviceKind::CUDA, "test"); }
Stream stream() { return gpu().stream_for(0); }

StridedDesc desc(const Tensor& t) { return ops::desc_of(t); }  // what core/ops hands a kernel

Tensor on_cpu(const Shape& shape, DType dt) { return empty(shape, dt); }
Tensor host_poisoned(const Shape& shape, DType dt) { return poisoned(shape, dt).to(Device::cpu()); }

}  // namespace

TEST_CASE("cuda backend: fill, arange and strided copies with casts agree with the CPU", "[cuda]") {
  require_gpu();
  const int64_t n = GENERATE(1, 7, 33, 129, 1000, 4099);  // 4099: past a small device's grid
  for (const DType dt : {DType::f32, DType::f64, DType::i64, DType::u8}) {
    Tensor want = on_cpu({n}, dt), got = poisoned({n}, dt);
    cpu().fill(dt, want.data(), n, 3.0, nullptr);
    gpu().fill(dt, got.data(), n, 3.0, stream());
    check_close(got, want, 0, 0, detail::str("fill ", dt));
    got = poisoned({n}, dt);
    cpu().arange(dt, want.data(), n, 2.0, dt == DType::u8 ? 0.0 : 0.5, nullptr);
    gpu().arange(dt, got.data(), n, 2.0, dt == DType::u8 ? 0.0 : 0.5, stream());
    check_close(got, want, 0, 0, detail::str("arange ", dt));
  }

  // A transposed view [13, n] of a dense [n, 13] array, gathered into dense memory with a cast.
  const Tensor x = seeded_host({n, 13}, DType::f32, 3);
  const Tensor xt = x.t(), gxt = x.to(kGpu).t();
  for (const DType to : {DType::f32, DType::f64, DType::i64}) {
    Tensor want = on_cpu(xt.shape(), to), got = poisoned(xt.shape(), to);
    cpu().copy(DType::f32, desc(xt), to, desc(want), nullptr);
    gpu().copy(DType::f32, desc(gxt), to, desc(got), stream());
    check_close(got, want, 0, 0, detail::str("transposed copy f32 -> ", to));
  }
}

TEST_CASE("cuda backend: copy_between moves bytes between the host and GPUs", "[cuda]") {
  require_gpu();
  const int64_t n = GENERATE(1, 7, 33, 129, 1000);
  const Tensor host = seeded_host({n}, DType::f64, 5);
  const int64_t nbytes = n * 8;

  Tensor on_gpu = poisoned({n}, DType::f64);
  gpu().copy_between(DeviceKind::CPU, 0, host.data(), DeviceKind::CUDA, 0, on_gpu.data(), nbytes);
  Tensor back = host_poisoned({n}, DType::f64);
  gpu().copy_between(DeviceKind::CUDA, 0, on_gpu.data(), DeviceKind::CPU, 0, back.data(), nbytes);
  check_close(back, host, 0, 0, "host -> cuda:0 -> host");

  Tensor same_device = poisoned({n}, DType::f64);
  gpu().copy_between(DeviceKind::CUDA, 0, on_gpu.data(), DeviceKind::CUDA, 0, same_device.data(), nbytes);
  check_close(same_device, host, 0, 0, "cuda:0 -> cuda:0");

  // Pinned host memory as the source: the copy must not return before it has read it.
  Allocator& pinned = cuda_pinned_allocator();
  void* staging = pinned.allocate(nbytes, Device::cpu());
  std::memcpy(staging, host.data(), static_cast<size_t>(nbytes));
  Tensor from_pinned = poisoned({n}, DType::f64);
  gpu().copy_between(DeviceKind::CPU, 0, staging, DeviceKind::CUDA, 0, from_pinned.data(), nbytes);
  std::memset(staging, 0xFF, static_cast<size_t>(nbytes));  // would corrupt a copy still in flight
  pinned.deallocate(staging, nbytes, Device::cpu());
  check_close(from_pinned, host, 0, 0, "pinned host -> cuda:0");
}

TEST_CASE("cuda backend: copy_between moves bytes from one GPU to another", "[cuda][multi-gpu]") {
  test::require_gpus(2);
  const int64_t n = GENERATE(1, 7, 33, 129, 1000);
  const Tensor host = seeded_host({n}, DType::f64, 5);
  const int64_t nbytes = n * 8;
  const Tensor on_gpu = host.to(Device::cuda(0));
  Tensor on_gpu1 = full({n}, NAN, TensorOptions(DType::f64).device(Device::cuda(1)));
  gpu().copy_between(DeviceKind::CUDA, 0, on_gpu.data(), DeviceKind::CUDA, 1, on_gpu1.data(), nbytes);
  check_close(on_gpu1, host, 0, 0, "cuda:0 -> cuda:1");
}

TEST_CASE("cuda backend: random draws and dropout equal the CPU's", "[cuda]") {
  require_gpu();
  const int64_t n = GENERATE(1, 7, 33, 129, 1000, 4099);  // 4099: past a small device's grid
  for (const DType dt : {DType::f32, DType::f64}) {
    Tensor want = on_cpu({n}, dt), got = poisoned({n}, dt);
    cpu().random(RandomKind::Uniform, dt, want.data(), n, 42, 7, -1.0, 3.0, nullptr);
    gpu().random(RandomKind::Uniform, dt, got.data(), n, 42, 7, -1.0, 3.0, stream());
    check_close(got, want, 1e-7, 1e-7, detail::str("uniform ", dt));
    got = poisoned({n}, dt);
    cpu().random(RandomKind::Normal, dt, want.data(), n, 42, 7, 0.5, 2.0, nullptr);
    gpu().random(RandomKind::Normal, dt, got.data(), n, 42, 7, 0.5, 2.0, stream());
    check_close(got, want, 1e-5, 1e-5, detail::str("normal ", dt));

    const Tensor x = seeded_host({n}, dt, 9);
    const Tensor gx = x.to(kGpu);
    Tensor y = on_cpu({n}, dt), mask = on_cpu({n}, dt);
    Tensor gy = poisoned({n}, dt), gmask = poisoned({n}, dt);
    cpu().dropout(dt, x.data(), y.data(), mask.data(), n, 0.3, 11, 3, nullptr);
    gpu().dropout(dt, gx.data(), gy.data(), gmask.data(), n, 0.3, 11, 3, stream());
    check_close(gmask, mask, 0, 0, detail::str("dropout mask ", dt));
    check_close(gy, y, 0, 0, detail::str("dropout output ", dt));
  }
}

TEST_CASE("cuda backend: every unary op and its backward agree with the CPU", "[cuda]") {
  require_gpu();
  const int64_t n = GENERATE(1, 7, 33, 129, 1000);
  const UnaryOp ops[] = {UnaryOp::Neg,      UnaryOp::Exp,       UnaryOp::Log,       UnaryOp::Sqrt,
                         UnaryOp::Relu,     UnaryOp::GeluTanh,  UnaryOp::GeluErf,   UnaryOp::Tanh,
                         UnaryOp::Sigmoid,  UnaryOp::AddScalar, UnaryOp::MulScalar, UnaryOp::RDivScalar,
                         UnaryOp::PowScalar};
  for (const DType dt : {DType::f32, DType::f64}) {
    const double eps = dt == DType::f32 ? 1.2e-7 : 2.3e-16;
    for (const UnaryOp op : ops) {
      const bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::PowScalar;
      const Tensor x = seeded_host({n}, dt, 13, positive ? 0.1 : -2.0, 2.0);
      const Tensor dy = seeded_host({n}, dt, 14);
      const double alpha = 1.5;
      Tensor y = on_cpu({n}, dt), gy = poisoned({n}, dt);
      cpu().unary(op, dt, x.data(), y.data(), n, alpha, nullptr);
      const Tensor gx = x.to(kGpu), gdy = dy.to(kGpu);
      gpu().unary(op, dt, gx.data(), gy.data(), n, alpha, stream());
      const std::string name = detail::str("unary op ", static_cast<int>(op), " ", dt);
      check_close(gy, y, 10 * eps, 8 * eps, name);

      // The backward reads x or y as UnaryOp documents; the CPU's y serves both sides.
      const bool saves_y = op == UnaryOp::Exp || op == UnaryOp::Sqrt || op == UnaryOp::Relu || op == UnaryOp::Tanh ||
                           op == UnaryOp::Sigmoid;
      const bool saves_none = op == UnaryOp::Neg || op == UnaryOp::AddScalar || op == UnaryOp::MulScalar;
      const Tensor saved = saves_y ? y : x;
      const Tensor gsaved = saved.to(kGpu);
      Tensor dx = on_cpu({n}, dt), gdx = poisoned({n}, dt);
      cpu().unary_backward(op, dt, saves_none ? nullptr : saved.data(), dy.data(), dx.data(), n, alpha, nullptr);
      gpu().unary_backward(op, dt, saves_none ? nullptr : gsaved.data(), gdy.data(), gdx.data(), n, alpha, stream());
      check_close(gdx, dx, 10 * eps, 16 * eps, name + " backward");
    }
  }
}

TEST_CASE("cuda backend: binary ops with broadcasting agree with the CPU bitwise", "[cuda]") {
  require_gpu();
  const int64_t rows = GENERATE(1, 7, 33, 129, 1000), cols = 19;
  const Tensor a = seeded_host({rows, cols}, DType::f32, 21), b_row = seeded_host({cols}, DType::f32, 22);
  const Tensor b = seeded_host({rows, cols}, DType::f32, 23);
  const Tensor ga = a.to(kGpu), gb_row = b_row.to(kGpu), gb = b.to(kGpu);
  struct Case {
    const char* name;
    Tensor a, b, ga, gb;
  };
  const Case cases[] = {
      {"dense", a, b, ga, gb},
      {"row broadcast", a, b_row.expand({rows, cols}), ga, gb_row.expand({rows, cols})},
      {"a transposed twice", a.t().contiguous().t(), b, ga.t().contiguous().t(), gb},
  };
  for (const Case& c : cases) {
    for (const BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div}) {
      Tensor want = on_cpu({rows, cols}, DType::f32), got = poisoned({rows, cols}, DType::f32);
      cpu().binary(op, DType::f32, desc(c.a), desc(c.b), want.data(), nullptr);
      gpu().binary(op, DType::f32, desc(c.ga), desc(c.gb), got.data(), stream());
      check_close(got, want, 0, 0, detail::str(c.name, " op ", static_cast<int>(op)));
    }
  }
}

TEST_CASE("cuda backend: sum, max and scatter_add_dim agree with the CPU", "[cuda]") {
  require_gpu();
  // (3, 347): more output positions than a small device's grid has threads (scatter_add_dim's loop).
  const auto [r, inner] = GENERATE(table<int64_t, int64_t>(
      {{1, 1}, {7, 1}, {33, 1}, {129, 1}, {1000, 1}, {1, 5}, {7, 5}, {33, 5}, {129, 5}, {1000, 5}, {3, 347}}));
  const int64_t outer = 3;
  for (const DType dt : {DType::f32, DType::f64}) {
    const Tensor x = seeded_host({outer, r, inner}, dt, 31);
    const Tensor gx = x.to(kGpu);
    Tensor y = on_cpu({outer, inner}, dt), gy = poisoned({outer, inner}, dt);
    cpu().reduce(ReduceOp::Sum, dt, x.data(), y.data(), nullptr, outer, r, inner, nullptr);
    gpu().reduce(ReduceOp::Sum, dt, gx.data(), gy.data(), nullptr, outer, r, inner, stream());
    check_close(gy, y, 1e-6, 1e-6, detail::str("sum ", dt));

    Tensor idx = on_cpu({outer, inner}, DType::i64), gidx = poisoned({outer, inner}, DType::i64);
    gy = poisoned({outer, inner}, dt);
    cpu().reduce(ReduceOp::Max, dt, x.data(), y.data(), static_cast<int64_t*>(idx.data()), outer, r, inner, nullptr);
    gpu().reduce(ReduceOp::Max, dt, gx.data(), gy.data(), static_cast<int64_t*>(gidx.data()), outer, r, inner,
                 stream());
    check_close(gy, y, 0, 0, detail::str("max ", dt));
    check_close(gidx, idx, 0, 0, detail::str("argmax ", dt));

    const Tensor src = seeded_host({outer, inner}, dt, 32);
    Tensor dst = seeded_host({outer, r, inner}, dt, 33);
    Tensor gdst = dst.to(kGpu);
    cpu().scatter_add_dim(dt, src.data(), static_cast<const int64_t*>(idx.data()), dst.data(), outer, r, inner,
                          nullptr);
    gpu().scatter_add_dim(dt, src.to(kGpu).data(), static_cast<const int64_t*>(gidx.data()), gdst.data(), outer, r,
                          inner, stream());
    check_close(gdst, dst, 0, 0, detail::str("scatter_add_dim ", dt));
  }
}

TEST_CASE("cuda backend: gemm agrees with the CPU for every transpose and epilogue", "[cuda]") {
  require_gpu();
  const auto [m, n, k] =
      GENERATE(table<int64_t, int64_t, int64_t>({{1, 1, 1}, {7, 33, 129}, {129, 7, 33}, {401, 133, 513}}));
  const bool trans_a = GENERATE(false, true);
  const bool trans_b = GENERATE(false, true);
  const int epilogue = GENERATE(0, 1, 2);  // none; bias + ReLU; bias + GELU-tanh, with beta = 0.5
  const Tensor a = seeded_host(trans_a ? Shape{k, m} : Shape{m, k}, DType::f32, 41, -1.0, 1.0);
  const Tensor b = seeded_host(trans_b ? Shape{n, k} : Shape{k, n}, DType::f32, 42, -1.0, 1.0);
  const Tensor bias = seeded_host({n}, DType::f32, 43);
  const Tensor c0 = seeded_host({m, n}, DType::f32, 44);
  GemmArgs args;
  args.m = m, args.n = n, args.k = k;
  args.trans_a = trans_a, args.trans_b = trans_b;
  args.lda = trans_a ? m : k, args.ldb = trans_b ? k : n, args.ldc = n;
  args.beta = epilogue == 0 ? 0.0 : 0.5;
  args.activation = epilogue == 1 ? Activation::Relu : epilogue == 2 ? Activation::GeluTanh : Activation::None;

  Tensor want = c0.clone();
  GemmArgs host = args;
  host.a = a.data(), host.b = b.data(), host.c = want.data(), host.bias = epilogue ? bias.data() : nullptr;
  cpu().gemm(host, nullptr);

  const Tensor ga = a.to(kGpu), gb = b.to(kGpu), gbias = bias.to(kGpu);
  Tensor got = epilogue == 0 ? poisoned({m, n}, DType::f32) : c0.to(kGpu);  // beta = 0 must not read C
  GemmArgs dev = args;
  dev.a = ga.data(), dev.b = gb.data(), dev.c = got.data(), dev.bias = epilogue ? gbias.data() : nullptr;
  gpu().gemm(dev, stream());
  // float32 accumulation over k terms of magnitude <= 1: the error grows with k.
  const double tol = 1e-6 + 3e-7 * static_cast<double>(k);
  check_close(got, want, tol, tol,
              detail::str("gemm m=", m, " n=", n, " k=", k, " trans_a=", trans_a, " trans_b=", trans_b, " epilogue=",
                          epilogue, " (", cuda::gemm_impl() == cuda::GemmImpl::Cublas ? "cublas" : "native", ")"));
}

TEST_CASE("cuda backend: softmax and log_softmax with their backward agree with the CPU", "[cuda]") {
  require_gpu();
  // (3, 347): more columns than a small device's grid has threads (the column kernels' loops).
  const auto [c, inner] = GENERATE(table<int64_t, int64_t>(
      {{1, 1}, {7, 1}, {33, 1}, {129, 1}, {1000, 1}, {1, 4}, {7, 4}, {33, 4}, {129, 4}, {1000, 4}, {3, 347}}));
  const int64_t outer = 3;
  for (const DType dt : {DType::f32, DType::f64}) {
    const double eps = dt == DType::f32 ? 1.2e-7 : 2.3e-16;
    const Tensor x = seeded_host({outer, c, inner}, dt, 51, -8.0, 8.0), dy = seeded_host({outer, c, inner}, dt, 52);
    for (const bool log : {false, true}) {
      Tensor y = on_cpu(x.shape(), dt), gy = poisoned(x.shape(), dt);
      cpu().softmax(dt, x.data(), y.data(), outer, c, inner, log, nullptr);
      gpu().softmax(dt, x.to(kGpu).data(), gy.data(), outer, c, inner, log, stream());
      check_close(gy, y, 64 * eps, 64 * eps, detail::str(log ? "log_softmax " : "softmax ", dt));
      Tensor dx = on_cpu(x.shape(), dt), gdx = poisoned(x.shape(), dt);
      const Tensor gyc = y.to(kGpu);  // both backwards read the same y
      cpu().softmax_backward(dt, y.data(), dy.data(), dx.data(), outer, c, inner, log, nullptr);
      gpu().softmax_backward(dt, gyc.data(), dy.to(kGpu).data(), gdx.data(), outer, c, inner, log, stream());
      check_close(gdx, dx, 256 * eps, 64 * eps, detail::str(log ? "log_softmax" : "softmax", " backward ", dt));
    }
  }
}

TEST_CASE("cuda backend: fused cross-entropy forward and backward agree with the CPU", "[cuda]") {
  require_gpu();
  const int64_t c = GENERATE(1, 7, 33, 129, 1000);
  const int64_t rows = 37;
  std::vector<int64_t> label_values(rows);
  for (int64_t r = 0; r < rows; ++r) label_values[r] = (r * 7919) % c;
  const Tensor labels = from_vector(label_values, {rows});
  const Tensor glabels = labels.to(kGpu);
  for (const DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 1e-5 : 1e-13;
    for (const double smoothing : {0.0, 0.1}) {
      const Tensor x = seeded_host({rows, c}, dt, 61, -6.0, 6.0);
      Tensor loss = on_cpu({rows}, dt), probs = on_cpu({rows, c}, dt);
      Tensor gloss = poisoned({rows}, dt), gprobs = poisoned({rows, c}, dt);
      const auto* lab = static_cast<const int64_t*>(labels.data());
      const auto* glab = static_cast<const int64_t*>(glabels.data());
      cpu().cross_entropy_forward(dt, x.data(), lab, loss.data(), probs.data(), rows, c, smoothing, nullptr);
      gpu().cross_entropy_forward(dt, x.to(kGpu).data(), glab, gloss.data(), gprobs.data(), rows, c, smoothing,
                                  stream());
      const std::string name = detail::str("cross_entropy ", dt, " smoothing ", smoothing);
      check_close(gloss, loss, tol, tol, name + " loss");
      check_close(gprobs, probs, tol, tol, name + " probs");

      const Tensor dloss = seeded_host({rows}, dt, 62);
      for (const int64_t stride : {int64_t{0}, int64_t{1}}) {  // Mean/Sum read one value; None one per row
        Tensor dx = on_cpu({rows, c}, dt), gdx = poisoned({rows, c}, dt);
        const Tensor gprobs_cpu_values = probs.to(kGpu);
        cpu().cross_entropy_backward(dt, probs.data(), lab, dloss.data(), stride, 0.25, dx.data(), rows, c, smoothing,
                                     nullptr);
        gpu().cross_entropy_backward(dt, gprobs_cpu_values.data(), glab, dloss.to(kGpu).data(), stride, 0.25,
                                     gdx.data(), rows, c, smoothing, stream());
        check_close(gdx, dx, tol, tol, detail::str(name, " backward, dloss stride ", stride));
      }
    }
  }
}

TEST_CASE("cuda backend: SGD and Adam steps agree with the CPU", "[cuda]") {
  require_gpu();
  const int64_t n = GENERATE(1, 7, 33, 129, 1000);
  for (const DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 1e-6 : 1e-14;
    const Tensor p0 = seeded_host({n}, dt, 71), g = seeded_host({n}, dt, 72), m0 = seeded_host({n}, dt, 73);
    const Tensor v0 = seeded_host({n}, dt, 74, 0.01, 1.0);
    const Tensor gg = g.to(kGpu);

    SgdStepArgs sgd;
    sgd.lr = 0.1, sgd.momentum = 0.9, sgd.weight_decay = 0.01, sgd.nesterov = true;
    Tensor p = p0.clone(), buf = m0.clone();
    Tensor gp = p0.to(kGpu), gbuf = m0.to(kGpu);
    cpu().sgd_step(dt, p.data(), g.data(), buf.data(), n, sgd, nullptr);
    gpu().sgd_step(dt, gp.data(), gg.data(), gbuf.data(), n, sgd, stream());
    check_close(gp, p, tol, tol, detail::str("sgd param ", dt));
    check_close(gbuf, buf, tol, tol, detail::str("sgd momentum buffer ", dt));

    AdamStepArgs adam;
    adam.lr = 1e-2, adam.weight_decay = 0.1, adam.decoupled_weight_decay = true, adam.step = 3;
    Tensor pa = p0.clone(), m = m0.clone(), v = v0.clone();
    Tensor gpa = p0.to(kGpu), gm = m0.to(kGpu), gv = v0.to(kGpu);
    cpu().adam_step(dt, pa.data(), g.data(), m.data(), v.data(), n, adam, nullptr);
    gpu().adam_step(dt, gpa.data(), gg.data(), gm.data(), gv.data(), n, adam, stream());
    check_close(gpa, pa, tol, tol, detail::str("adamw param ", dt));
    check_close(gm, m, tol, tol, detail::str("adamw exp_avg ", dt));
    check_close(gv, v, tol, tol, detail::str("adamw exp_avg_sq ", dt));
  }
}

TEST_CASE("cuda backend: errors name the op, the dtype and the device", "[cuda]") {
  require_gpu();
  Tensor t = zeros({4}, TensorOptions(DType::f64).device(kGpu));
  GemmArgs args;
  args.dtype = DType::f64;
  args.m = args.n = args.k = 1;
  args.a = args.b = args.c = t.data();
  args.lda = args.ldb = args.ldc = 1;
  CHECK_ERROR(gpu().gemm(args, stream()), "gemm", "float32 only", "float64", "cuda:0");
  Tensor h = zeros({4}, TensorOptions(DType::bf16).device(kGpu));
  CHECK_ERROR(gpu().random(RandomKind::Uniform, DType::bf16, h.data(), 4, 1, 0, 0.0, 1.0, stream()), "random",
              "bfloat16", "cuda:0");
  CHECK_ERROR(gpu().random(RandomKind::Uniform, DType::f16, h.data(), 4, 1, 0, 0.0, 1.0, stream()), "random", "float16",
              "cuda:0");
  CHECK_ERROR(gpu().unary(UnaryOp::Exp, DType::i64, t.data(), t.data(), 4, 0.0, stream()), "unary", "int64", "cuda:0");
  // Work is only ever queued on ringgrad's own streams, never on the legacy default stream.
  CHECK_ERROR(gpu().fill(DType::f64, t.data(), 4, 0.0, nullptr), "fill", "the null stream");
}

TEST_CASE("cuda backend: one non-blocking stream per device, the same on every call", "[cuda]") {
  require_gpu();
  const Stream s = gpu().stream_for(0);
  CHECK(s != nullptr);  // never the legacy default stream
  CHECK(gpu().stream_for(0) == s);
  if (cuda_device_count() > 1) CHECK(gpu().stream_for(1) != s);
  CHECK_ERROR(gpu().stream_for(cuda_device_count()), "stream_for", "cuda:0..cuda:");
}

TEST_CASE("cuda backend: RINGGRAD_GEMM chooses the GEMM and rejects anything else", "[cuda]") {
  // Host-only: needs no GPU.
  CHECK(cuda::parse_gemm_impl(nullptr) == cuda::GemmImpl::Native);
  CHECK(cuda::parse_gemm_impl("") == cuda::GemmImpl::Native);
  CHECK(cuda::parse_gemm_impl("native") == cuda::GemmImpl::Native);
  CHECK(cuda::parse_gemm_impl("cublas") == cuda::GemmImpl::Cublas);
  CHECK_ERROR(cuda::parse_gemm_impl("cuBLAS"), "RINGGRAD_GEMM", "'native'", "'cublas'", "got 'cuBLAS'");
}
