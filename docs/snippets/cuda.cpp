// docs/snippets/cuda.cpp: the first example of docs/cuda.md -- one forward and backward of an MLP on
// cuda:0. Compiled in every build (core/cuda.h is there even without CUDA); its CTest exists only in
// CUDA builds and carries the label `cuda`, not `docs`: like the other GPU tests it needs a GPU and
// fails without one, and tools/gpu_check.sh runs it with them.
#include <cmath>
#include <iostream>

#include "mlp.h"

using namespace ringgrad;

int main() {
  snippets::expect(cuda_device_count() > 0, "a CUDA GPU is visible (this snippet is for `ctest -L cuda` on a GPU)");
  Tensor labels = snippets::labels_for(256, 10);

  // [forward_backward]
  Tensor x = randn({256, 784}).to(Device::cuda(0));  // host -> GPU
  auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{784, 1024, 10});
  model->to(Device::cuda(0));
  Tensor loss = cross_entropy(model->forward(x), labels.to(Device::cuda(0)));
  loss.backward();
  std::cout << loss.item() << '\n';                           // waits for the GPU, then reads one float
  std::cout << cuda_memory_stats(0).raw_alloc_count << '\n';  // cudaMalloc calls so far
  // [/forward_backward]

  snippets::expect(std::isfinite(loss.item()) && loss.item() > 0.0, "a finite, positive loss");
  Tensor grad = model->layers[0]->weight.grad();
  snippets::expect(grad.defined() && grad.device() == Device::cuda(0), "the gradients are on cuda:0");
  snippets::expect(cuda_memory_stats(0).raw_alloc_count > 0, "the tensors came from cudaMalloc");
  return 0;
}
