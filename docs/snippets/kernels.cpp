// docs/snippets/kernels.cpp: docs/kernels.md's examples -- what the fused epilogue computes, through
// the op (linear with an activation) and through the backend interface itself.
#include <cmath>

#include "mlp.h"
#include <ringgrad/kernels/backend.h>

using namespace ringgrad;
using namespace ringgrad::kernels;  // Backend, GemmArgs, UnaryOp, backend_for: the kernel layer's vocabulary

int main() {
  Tensor x = randn({64, 784}, TensorOptions(), /*seed=*/21);
  Tensor weight = randn({256, 784}, TensorOptions(), /*seed=*/22);
  Tensor bias = randn({256}, TensorOptions(), /*seed=*/23);

  // [fused_linear]
  Tensor fused = linear(x, weight, bias, Activation::Relu);  // one GEMM; bias and ReLU in its epilogue
  Tensor unfused = relu(linear(x, weight, bias));            // the same values, one more pass over y
  // [/fused_linear]

  // [backend_gemm]
  // What linear() asks of the backend: y[64 x 256] = relu(x[64 x 784] W^T + b). W is stored
  // (256, 784) row-major, so op(B) = W^T is passed as trans_b instead of being copied.
  Tensor y = empty({64, 256});
  GemmArgs args;
  args.dtype = DType::f32;
  args.m = 64, args.n = 256, args.k = 784;
  args.a = x.data(), args.lda = 784;
  args.b = weight.data(), args.ldb = 784, args.trans_b = true;
  args.c = y.data(), args.ldc = 256;
  args.bias = bias.data();
  args.activation = Activation::Relu;
  backend_for(DeviceKind::CPU).gemm(args, /*stream=*/nullptr);
  // [/backend_gemm]

  const std::vector<float> a = fused.to_vector<float>(), b = unfused.to_vector<float>(), c = y.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) {
    snippets::expect(std::fabs(a[i] - b[i]) <= 1e-4f * (1.0f + std::fabs(b[i])), "fused == unfused");
    snippets::expect(a[i] == c[i], "linear() == the backend call it makes");
  }
  std::cout << "kernels: fused epilogue agrees with the unfused ops\n";
  return 0;
}
