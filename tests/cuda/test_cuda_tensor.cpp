// tests/cuda/test_cuda_tensor.cpp: CUDA tensors through the public API -- transfers (to, copy_,
// item, to_vector, printing), ops and autograd on cuda:0 against the same ops on the CPU, and
// finite-difference gradient checks whose function runs on the GPU.
//
// Label `cuda`: these tests FAIL without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/base/fp16.h>
#include <ringgrad/core/cuda.h>
#include <ringgrad/core/gradcheck.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include "cuda_test_util.h"
#include "test_util.h"

using namespace ringgrad;
using ringgrad::test::check_close;
using ringgrad::test::require_gpu;
using ringgrad::test::seeded_host;

namespace {

const Device kGpu = Device::cuda(0);

}  // namespace

TEST_CASE("cuda tensors: to and back keeps every value of every dtype", "[cuda]") {
  require_gpu();
  const int64_t n = GENERATE(1, 7, 33, 129, 1000);
  for (const DType dt : {DType::f32, DType::f64, DType::i64}) {
    const Tensor x = seeded_host({n}, dt, 1, -100.0, 100.0);
    const Tensor g = x.to(kGpu);
    CHECK(g.device() == kGpu);
    CHECK(g.dtype() == dt);
    check_close(g.to(Device::cpu()), x, 0, 0, detail::str("round trip ", dt));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(n));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 37);
  const Tensor u = from_vector(bytes, {n});
  CHECK(u.to(kGpu).to_vector<uint8_t>() == bytes);
  // bfloat16 lives only on the GPU here: f32 -> bf16 keeps 8 significant bits: round to nearest moves a value by
  // at most half an ulp, 2^-8 relative to the power of two below it (relative error <= 2^-8).
  const Tensor x = seeded_host({n}, DType::f32, 2);
  const Tensor b = x.to(kGpu, DType::bf16);
  CHECK(b.dtype() == DType::bf16);
  check_close(b.to(Device::cpu(), DType::f32), x, 0, 1.0 / 256, "f32 -> bf16 on cuda:0 -> f32 on the host");
  // float16 likewise, with 11 significant bits (relative error <= 2^-11), rounded on the GPU exactly
  // as the host's float_to_fp16 rounds: moved to the host as float16, the bits are those.
  const Tensor h = x.to(kGpu, DType::f16);
  CHECK(h.dtype() == DType::f16);
  check_close(h.to(Device::cpu(), DType::f32), x, 0, 1.0 / 2048, "f32 -> f16 on cuda:0 -> f32 on the host");
  const Tensor h_host = h.to(Device::cpu());
  CHECK(h_host.dtype() == DType::f16);
  const std::vector<float> xs = x.to_vector<float>();
  const auto* bits = static_cast<const uint16_t*>(h_host.data());
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += bits[i] != float_to_fp16(xs[static_cast<size_t>(i)]);
  CHECK(differ == 0);
}

TEST_CASE("cuda tensors: dtype conversions during a transfer run on the GPU side", "[cuda]") {
  require_gpu();
  const Tensor x = seeded_host({33, 7}, DType::f64, 3);
  const Tensor g32 = x.to(kGpu, DType::f32);  // host f64 -> GPU, then converted there
  CHECK(g32.dtype() == DType::f32);
  check_close(g32, x.to(DType::f32), 0, 0, "host f64 -> cuda f32");
  const Tensor back = g32.to(Device::cpu(), DType::f64);  // converted on the GPU, then moved
  check_close(back, x.to(DType::f32).to(DType::f64), 0, 0, "cuda f32 -> host f64");
  CHECK(x.to(kGpu).to_vector<float>() == x.to(DType::f32).to_vector<float>());
}

TEST_CASE("cuda tensors: a strided source is made dense on its own device before it crosses", "[cuda]") {
  require_gpu();
  const Tensor x = seeded_host({129, 33}, DType::f32, 4);
  const Tensor gx = x.to(kGpu);
  // Host views going up.
  check_close(x.t().to(kGpu), x.t(), 0, 0, "transposed host view -> cuda");
  check_close(x.slice(0, 1, 129, 3).to(kGpu), x.slice(0, 1, 129, 3), 0, 0, "stepped host slice -> cuda");
  check_close(x.select(1, 5).unsqueeze(0).expand({4, 129}).to(kGpu), x.select(1, 5).unsqueeze(0).expand({4, 129}), 0, 0,
              "expanded host column -> cuda");
  // GPU views coming down, and GPU views of GPU views.
  check_close(gx.t(), x.t(), 0, 0, "transposed cuda view -> host");
  check_close(gx.narrow(1, 3, 20).t().contiguous(), x.narrow(1, 3, 20).t(), 0, 0, "cuda narrow + transpose");
  CHECK(gx.t().contiguous().is_contiguous());
}

TEST_CASE("cuda tensors: copy_ across devices, item, to_vector and printing", "[cuda]") {
  require_gpu();
  const Tensor x = seeded_host({7, 5}, DType::f32, 5);
  Tensor g = zeros({7, 5}, kGpu);
  g.copy_(x);  // host -> GPU into existing memory
  check_close(g, x, 0, 0, "copy_ host -> cuda");
  Tensor gt = zeros({5, 7}, TensorOptions(DType::f64).device(kGpu));
  gt.copy_(x.t());  // strided host source, with a cast
  check_close(gt, x.t().to(DType::f64), 0, 0, "copy_ transposed f32 host -> f64 cuda");
  Tensor h = zeros({7, 5});
  h.copy_(g);  // GPU -> host
  check_close(h, x, 0, 0, "copy_ cuda -> host");
  Tensor region = zeros({7, 10}, kGpu);
  region.narrow(1, 5, 5).copy_(x);  // into a strided GPU view
  check_close(region.narrow(1, 5, 5), x, 0, 0, "copy_ into a narrowed cuda view");
  check_close(region.narrow(1, 0, 5), zeros({7, 5}), 0, 0, "the rest of the view's base is untouched");
  // Overlapping views of one GPU buffer: a dense copy between them would be one cudaMemcpyAsync over
  // overlapping memory (undefined on a GPU, refused by the emulator); copy_ reads a copy of the source.
  Tensor shift = arange(int64_t{1000}, DType::f32).to(kGpu);
  shift.narrow(0, 1, 999).copy_(shift.narrow(0, 0, 999));
  check_close(shift.narrow(0, 1, 999), arange(int64_t{999}, DType::f32), 0, 0, "copy_ shifted right within one buffer");
  Tensor square = arange(int64_t{49}, DType::f32).reshape({7, 7});
  Tensor gsquare = square.to(kGpu);
  gsquare.copy_(gsquare.t());
  check_close(gsquare, square.t(), 0, 0, "copy_ of a GPU matrix's transpose into itself");

  CHECK(full({}, 2.5, kGpu).item() == 2.5);
  CHECK(sum(g).item() == Approx(sum(x).item()).epsilon(1e-6));
  CHECK(g.to_vector<float>() == x.to_vector<float>());
  std::ostringstream gpu_text, cpu_text;
  gpu_text << full({2}, 1.5, kGpu);
  cpu_text << full({2}, 1.5);
  const std::string cpu_str = cpu_text.str();
  CHECK(gpu_text.str() == cpu_str.substr(0, cpu_str.size() - 1) + ", device=cuda:0)");
}

TEST_CASE("cuda tensors: float16 ops compute in float and round the result once", "[cuda]") {
  require_gpu();
  const Tensor a16 = seeded_host({33, 7}, DType::f32, 11).to(kGpu, DType::f16);
  const Tensor b16 = seeded_host({33, 7}, DType::f32, 12).to(kGpu, DType::f16);
  const Tensor a = a16.to(DType::f32), b = b16.to(DType::f32);  // the float16 values, exactly
  // add: one float addition, rounded to float16 -- what the host computes from the same values.
  const Tensor c = a16 + b16;
  CHECK(c.dtype() == DType::f16);
  CHECK(c.device() == kGpu);
  std::vector<float> want = (a + b).to_vector<float>();
  for (float& v : want) v = fp16_to_float(float_to_fp16(v));
  check_close(c, from_vector(want, {33, 7}), 0, 0, "f16 add");
  // The rest within the rounding of the result (2^-11 relative), beside float32 of the same inputs.
  check_close(tanh(a16), tanh(a), 1e-6, 1.0 / 2048, "f16 tanh");
  check_close(softmax(a16, 1), softmax(a, 1), 1e-6, 1.0 / 2048, "f16 softmax");
  check_close(sum(a16, {1}), sum(a, {1}), 1e-5, 1.0 / 2048, "f16 sum over a dimension");
  CHECK(full({}, 2.5, TensorOptions(DType::f16).device(kGpu)).item() == 2.5);
  std::ostringstream text;
  text << full({2}, 1.5, TensorOptions(DType::f16).device(kGpu));
  CHECK(text.str() == "tensor([1.5000, 1.5000], dtype=float16, device=cuda:0)");
}

TEST_CASE("cuda tensors: ops and their gradients agree with the CPU", "[cuda]") {
  require_gpu();
  const int64_t rows = GENERATE(1, 7, 33, 129), cols = 13;
  const Tensor x = seeded_host({rows, cols}, DType::f32, 6);
  const Tensor w = seeded_host({11, cols}, DType::f32, 7, -0.5, 0.5);
  const Tensor b = seeded_host({11}, DType::f32, 8);
  const Tensor gamma = seeded_host({11}, DType::f32, 9);
  std::vector<int64_t> label_values(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) label_values[static_cast<size_t>(r)] = (r * 5) % 11;
  const Tensor labels = from_vector(label_values, {rows});

  // A little of everything: linear with fused ReLU, GELU, layer_norm (composed of primitive ops),
  // softmax, max, broadcasting, sum and mean, and the fused cross-entropy.
  auto run = [&](Device device, std::vector<Tensor>& grads) {
    // detach(): to(cpu) of a CPU tensor returns the same handle, which must stay a plain input.
    Tensor xd = x.detach().to(device).requires_grad_(true), wd = w.detach().to(device).requires_grad_(true);
    Tensor bd = b.detach().to(device).requires_grad_(true), gd = gamma.detach().to(device).requires_grad_(true);
    Tensor h = linear(xd, wd, bd, Activation::Relu);
    Tensor z = layer_norm(gelu(h + 0.25, GeluApproximate::Tanh), gd, Tensor());
    Tensor p = softmax(z * 2.0, 1);
    Tensor loss = cross_entropy(z, labels.to(device)) + mean(p * tanh(z)) + sum(max(z, 1).first) * 0.01 +
                  mean(sigmoid(z) / (exp(z * 0.1) + 1.0));
    loss.backward();
    grads = {xd.grad(), wd.grad(), bd.grad(), gd.grad()};
    return loss;
  };
  std::vector<Tensor> cpu_grads, gpu_grads;
  const Tensor cpu_loss = run(Device::cpu(), cpu_grads);
  const Tensor gpu_loss = run(kGpu, gpu_grads);
  CHECK(gpu_loss.device() == kGpu);
  check_close(gpu_loss, cpu_loss, 1e-5, 1e-5, "loss");
  const char* names[] = {"x.grad", "w.grad", "b.grad", "gamma.grad"};
  for (size_t i = 0; i < cpu_grads.size(); ++i) {
    REQUIRE(gpu_grads[i].defined());
    CHECK(gpu_grads[i].device() == kGpu);
    check_close(gpu_grads[i], cpu_grads[i], 1e-5, 1e-4, names[i]);
  }
}

TEST_CASE("cuda tensors: matmul and its gradients agree with the CPU in float32, batched too", "[cuda]") {
  require_gpu();
  const auto [m, n, k] = GENERATE(table<int64_t, int64_t, int64_t>({{1, 1, 1}, {33, 7, 129}, {401, 133, 513}}));
  const Tensor a = seeded_host({m, k}, DType::f32, 10, -1.0, 1.0), b = seeded_host({k, n}, DType::f32, 11, -1.0, 1.0);
  const Tensor dc = seeded_host({m, n}, DType::f32, 12, -1.0, 1.0);
  auto run = [&](Device device) {
    Tensor ad = a.detach().to(device).requires_grad_(true), bd = b.detach().to(device).requires_grad_(true);
    Tensor c = matmul(ad, bd);
    c.backward(dc.to(device));
    return std::vector<Tensor>{c, ad.grad(), bd.grad()};
  };
  const std::vector<Tensor> want = run(Device::cpu()), got = run(kGpu);
  const double tol = 1e-6 + 3e-7 * static_cast<double>(std::max({m, n, k}));
  check_close(got[0], want[0], tol, tol, "c = a @ b");
  check_close(got[1], want[1], tol, tol, "a.grad = dc @ b^T (transposed operand read in place)");
  check_close(got[2], want[2], tol, tol, "b.grad = a^T @ dc");

  const Tensor a3 = seeded_host({3, 17, 9}, DType::f32, 13), b3 = seeded_host({3, 9, 5}, DType::f32, 14);
  check_close(matmul(a3.to(kGpu), b3.to(kGpu)), matmul(a3, b3), 1e-5, 1e-5, "batched matmul");
  check_close(matmul(a3.to(kGpu), b3.select(0, 1).to(kGpu)), matmul(a3, b3.select(0, 1)), 1e-5, 1e-5,
              "batched matmul with a shared right operand");
}

TEST_CASE("cuda tensors: matmul broadcasts batch dims as on the CPU, forward and backward", "[cuda]") {
  require_gpu();
  // Attention's (batch, heads, T, d) @ (batch, heads, d, T) with a transposed view, and an operand
  // broadcast along one batch dim only (expanded into dense memory first).
  const Tensor q = seeded_host({2, 3, 7, 5}, DType::f32, 20), k = seeded_host({2, 3, 7, 5}, DType::f32, 21);
  const Tensor a = seeded_host({2, 1, 7, 5}, DType::f32, 22), b = seeded_host({3, 5, 4}, DType::f32, 23);
  auto run = [&](Device device) {
    Tensor qd = q.detach().to(device).requires_grad_(true), kd = k.detach().to(device).requires_grad_(true);
    Tensor ad = a.detach().to(device).requires_grad_(true), bd = b.detach().to(device).requires_grad_(true);
    const Tensor scores = matmul(qd, kd.transpose(-1, -2)), mixed = matmul(ad, bd);
    (sum(scores * scores) + sum(mixed * mixed)).backward();
    return std::vector<Tensor>{scores, mixed, qd.grad(), kd.grad(), ad.grad(), bd.grad()};
  };
  const std::vector<Tensor> want = run(Device::cpu()), got = run(kGpu);
  const char* names[] = {"q k^T",
                         "a @ b (a broadcast)",
                         "q.grad",
                         "k.grad",
                         "a.grad (summed over b's batch)",
                         "b.grad (summed over a's batch)"};
  for (size_t i = 0; i < want.size(); ++i) check_close(got[i], want[i], 1e-4, 1e-4, names[i]);
}

TEST_CASE("cuda tensors: gradcheck in float64 through ops that run on the GPU", "[cuda]") {
  require_gpu();
  // Each function moves its float64 CPU inputs to cuda:0, computes there, and returns the result to
  // the CPU: finite differences of the GPU forward against the GPU backward.
  auto on_gpu = [](std::function<Tensor(const std::vector<Tensor>&)> fn) {
    return [fn](const std::vector<Tensor>& in) {
      std::vector<Tensor> moved;
      for (const Tensor& t : in) moved.push_back(t.to(kGpu));
      return fn(moved).to(Device::cpu());
    };
  };
  const Tensor x = seeded_host({7, 5}, DType::f64, 15).requires_grad_(true);
  const Tensor y = seeded_host({7, 5}, DType::f64, 16).requires_grad_(true);
  const Tensor pos = seeded_host({7, 5}, DType::f64, 17, 0.2, 2.0).requires_grad_(true);
  const Tensor row = seeded_host({5}, DType::f64, 18).requires_grad_(true);

  using V = const std::vector<Tensor>&;
  CHECK_GRADCHECK(on_gpu([](V t) { return tanh(t[0]) * sigmoid(t[1]); }), {x, y});
  CHECK_GRADCHECK(on_gpu([](V t) { return exp(t[0] * 0.5) / (t[1] * t[1] + 1.0); }), {x, y});
  CHECK_GRADCHECK(on_gpu([](V t) { return log(t[0]) + sqrt(t[0]) + pow(t[0], 1.7) + 2.0 / t[0]; }), {pos});
  CHECK_GRADCHECK(on_gpu([](V t) { return gelu(t[0]) + gelu(t[0], GeluApproximate::Tanh) + relu(t[0]); }), {x});
  CHECK_GRADCHECK(on_gpu([](V t) { return t[0] * t[1] - t[1] / (t[0] * t[0] + 2.0); }), {x, row});
  CHECK_GRADCHECK(on_gpu([](V t) { return sum(t[0], {1}) + mean(t[0], {1}) * 3.0; }), {x});
  CHECK_GRADCHECK(on_gpu([](V t) { return max(t[0], 0).first + sum(max(t[0], 1, true).first); }), {x});
  CHECK_GRADCHECK(on_gpu([](V t) { return softmax(t[0], 1) * t[1] + log_softmax(t[0], 0); }), {x, y});
  CHECK_GRADCHECK(on_gpu([](V t) { return layer_norm(t[0], t[1], t[1] * 0.5); }), {x, row});
  CHECK_GRADCHECK(on_gpu([](V t) { return cat({t[0].t(), t[1].narrow(1, 1, 3).t()}, 0); }), {x, y});
  CHECK_GRADCHECK(on_gpu([](V t) {
                    const Tensor labels = from_vector<int64_t>({0, 4, 2, 2, 1, 3, 0}, {7}, kGpu);
                    return cross_entropy(t[0], labels, Reduction::Mean, 0.1);
                  }),
                  {x});
  // The transfer itself is differentiable: the gradient goes back to the CPU.
  CHECK_GRADCHECK([](V t) { return (t[0].to(kGpu) * 3.0).to(Device::cpu()); }, {x});
}

TEST_CASE("cuda tensors: silu on the GPU matches finite differences and the CPU", "[cuda]") {
  require_gpu();
  const Tensor x = seeded_host({7, 5}, DType::f64, 19, -5.0, 5.0).requires_grad_(true);
  CHECK_GRADCHECK([](const std::vector<Tensor>& t) { return silu(t[0].to(kGpu)).to(Device::cpu()); }, {x});
  const Tensor y = silu(x), y_gpu = silu(x.to(kGpu)).to(Device::cpu());
  const std::vector<double> a = y.to_vector<double>(), b = y_gpu.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) CHECK(b[i] == Approx(a[i]).epsilon(1e-14).margin(1e-15));
}

TEST_CASE("cuda tensors: mistakes name the op, the dtype and the devices", "[cuda]") {
  require_gpu();
  const Tensor g64 = seeded_host({3, 3}, DType::f64, 19).to(kGpu);
  CHECK_ERROR(matmul(g64, g64), "gemm", "float32 only", "float64", "cuda:0");
  const Tensor g = zeros({3}, kGpu), h = zeros({3});
  CHECK_ERROR(add(g, h), "add", "cuda:0", "cpu:0", ".to(");
  CHECK_ERROR(g.data<float>(), "data<T>", "cuda:0", ".to(Device::cpu())");
}

TEST_CASE("cuda tensors: a copy between two GPUs", "[cuda][multi-gpu]") {
  test::require_gpus(2);
  const Tensor x = seeded_host({129, 33}, DType::f32, 20);
  const Tensor g1 = x.to(kGpu).to(Device::cuda(1));
  CHECK(g1.device() == Device::cuda(1));
  check_close(g1, x, 0, 0, "cuda:0 -> cuda:1");
  check_close(x.to(kGpu).t().to(Device::cuda(1), DType::f64), x.t().to(DType::f64), 0, 0,
              "transposed f32 on cuda:0 -> f64 on cuda:1");
}
