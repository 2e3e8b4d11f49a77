// docs/snippets/readme.cpp: the C++ blocks of the top-level README.md, compiled and run (with
// RINGGRAD_CPU_DEVICES=2, for the DataParallel block; the process-group blocks run as a job of one).
// Blocks that declare names the others reuse sit in their own scope, indented like the body they
// are; the README's copies are checked against these regions by tools/check_snippets.py.
#include <cstdlib>
#include <iostream>

#include <ringgrad/ringgrad.h>

#include "mlp.h"

int main() {
  {
// [first_program]
#include <ringgrad/ringgrad.h>
    using namespace ringgrad;

    Tensor x = from_vector<float>({1.5f, -2.0f, 3.0f}).requires_grad_(true);
    Tensor y = sum(x * x);
    y.backward();
    std::cout << x.grad() << '\n';  // tensor([ 3.0000, -4.0000,  6.0000])
    // [/first_program]
    snippets::expect(x.grad().to_vector<float>() == std::vector<float>{3.0f, -4.0f, 6.0f}, "d/dx sum(x*x) = 2x");
  }
  using namespace ringgrad;
  Tensor x = randn({8, 784}, TensorOptions(), /*seed=*/2);
  Tensor labels = snippets::labels_for(8, 10);
  using snippets::Mlp;  // the README shows its definition from mlp.h#mlp
  // [train_step]
  auto model = std::make_shared<Mlp>(784, 256, 10);
  nn::optim::SGD opt(model->parameters(), nn::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  Tensor loss = cross_entropy(model->forward(x), labels);
  opt.zero_grad();
  loss.backward();
  opt.step();
  nn::save_model("mlp.safetensors", *model);  // opens in PyTorch's safetensors tools too
  // [/train_step]
  {
    // [data_parallel]
    parallel::DataParallel<Mlp> dp(model, {Device::cpu(0), Device::cpu(1)});
    Tensor loss = cross_entropy(dp.forward(x), labels);  // scatter, replicate, parallel_apply, gather
    // [/data_parallel]
    snippets::expect(loss.requires_grad(), "DataParallel's loss has a graph");
  }
  // A job of one unless a launcher says otherwise: ringrun (or torchrun) sets these for every process.
  setenv("RANK", "0", /*overwrite=*/0);
  setenv("WORLD_SIZE", "1", /*overwrite=*/0);
  Tensor before = model->fc1->weight.grad().clone();
  // [all_reduce]
  auto pg = parallel::init_process_group("ring");         // "nccl" for GPUs
  Tensor grad = model->fc1->weight.grad();                // this process's gradient
  pg->all_reduce(grad, parallel::ReduceOp::Avg)->wait();  // the mean over all processes
  // [/all_reduce]
  if (pg->size() == 1) {
    snippets::expect(grad.to_vector<float>() == before.to_vector<float>(), "the mean over one process is itself");
  }
  {
    // [ddp]
    parallel::DistributedDataParallel<Mlp> ddp(model, pg);  // each process: full replica, own data shard
    Tensor loss = cross_entropy(ddp.forward(x), labels);
    loss.backward();  // .grad = average over all processes
    // [/ddp]
    snippets::expect(model->fc1->weight.grad().defined(), "DDP fills .grad");
  }
  return 0;
}
