// docs/snippets/extending.cpp: docs/extending.md's examples -- a compute backend (a decorator that
// counts what it is asked, over the CPU backend) and a collective backend registered by name.
// Runs as docs_snippet_extending and exits 1 when either does not behave as the page says.
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ringgrad/kernels/backend.h>
#include "mlp.h"

using namespace ringgrad;
using namespace ringgrad::kernels;  // Backend, GemmArgs, UnaryOp, backend_for: the kernel layer's vocabulary

namespace {

// [counting_backend]
// A backend implements kernels/backend.h: raw pointers, sizes, strides and streams, never Tensor.
// This one forwards every call to the CPU backend and counts the calls by kind.
class CountingBackend final : public Backend {
 public:
  const char* name() const override { return "counting"; }
  void gemm(const GemmArgs& args, Stream s) override {
    ++calls["gemm"];
    cpu().gemm(args, s);
  }
  void unary(UnaryOp op, DType dt, const void* x, void* y, int64_t n, double alpha, Stream s) override {
    ++calls["unary"];
    cpu().unary(op, dt, x, y, n, alpha, s);
  }
  // ... and so on for every pure virtual of Backend (the rest of this file).
  // [/counting_backend]
  void fill(DType dt, void* dst, int64_t n, double value, Stream s) override { cpu().fill(dt, dst, n, value, s); }
  void arange(DType dt, void* dst, int64_t n, double start, double step, Stream s) override {
    cpu().arange(dt, dst, n, start, step, s);
  }
  void copy(DType src_dt, const StridedDesc& src, DType dst_dt, const StridedDesc& dst, Stream s) override {
    cpu().copy(src_dt, src, dst_dt, dst, s);
  }
  void copy_between(DeviceKind src_kind, int src_index, const void* src, DeviceKind dst_kind, int dst_index, void* dst,
                    int64_t nbytes) override {
    cpu().copy_between(src_kind, src_index, src, dst_kind, dst_index, dst, nbytes);
  }
  void random(RandomKind kind, DType dt, void* dst, int64_t n, uint64_t seed, uint64_t offset, double a, double b,
              Stream s) override {
    cpu().random(kind, dt, dst, n, seed, offset, a, b, s);
  }
  void unary_backward(UnaryOp op, DType dt, const void* saved, const void* dy, void* dx, int64_t n, double alpha,
                      Stream s) override {
    cpu().unary_backward(op, dt, saved, dy, dx, n, alpha, s);
  }
  void binary(BinaryOp op, DType dt, const StridedDesc& a, const StridedDesc& b, void* out, Stream s) override {
    cpu().binary(op, dt, a, b, out, s);
  }
  void reduce(ReduceOp op, DType dt, const void* x, void* y, int64_t* indices, int64_t outer, int64_t r, int64_t inner,
              Stream s) override {
    cpu().reduce(op, dt, x, y, indices, outer, r, inner, s);
  }
  void scatter_add_dim(DType dt, const void* src, const int64_t* index, void* dst, int64_t outer, int64_t r,
                       int64_t inner, Stream s) override {
    cpu().scatter_add_dim(dt, src, index, dst, outer, r, inner, s);
  }
  void softmax(DType dt, const void* x, void* y, int64_t outer, int64_t c, int64_t inner, bool log, Stream s) override {
    cpu().softmax(dt, x, y, outer, c, inner, log, s);
  }
  void softmax_backward(DType dt, const void* y, const void* dy, void* dx, int64_t outer, int64_t c, int64_t inner,
                        bool log, Stream s) override {
    cpu().softmax_backward(dt, y, dy, dx, outer, c, inner, log, s);
  }
  void cross_entropy_forward(DType dt, const void* logits, const int64_t* labels, void* loss, void* probs, int64_t rows,
                             int64_t c, double label_smoothing, Stream s) override {
    cpu().cross_entropy_forward(dt, logits, labels, loss, probs, rows, c, label_smoothing, s);
  }
  void cross_entropy_backward(DType dt, const void* probs, const int64_t* labels, const void* dloss,
                              int64_t dloss_stride, double scale, void* dlogits, int64_t rows, int64_t c,
                              double label_smoothing, Stream s) override {
    cpu().cross_entropy_backward(dt, probs, labels, dloss, dloss_stride, scale, dlogits, rows, c, label_smoothing, s);
  }
  void dropout(DType dt, const void* x, void* y, void* mask, int64_t n, double p, uint64_t seed, uint64_t offset,
               Stream s) override {
    cpu().dropout(dt, x, y, mask, n, p, seed, offset, s);
  }
  void sgd_step(DType dt, void* param, const void* grad, void* momentum_buffer, int64_t n, const SgdStepArgs& args,
                Stream s) override {
    cpu().sgd_step(dt, param, grad, momentum_buffer, n, args, s);
  }
  void adam_step(DType dt, void* param, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                 const AdamStepArgs& args, Stream s) override {
    cpu().adam_step(dt, param, grad, exp_avg, exp_avg_sq, n, args, s);
  }

  std::map<std::string, int> calls;

 private:
  static Backend& cpu() { return *built_backend(DeviceKind::CPU); }
};

// [self_group]
// A collective backend for a job of one process: every collective is already complete, since the
// only rank holds the only contribution. A real backend moves bytes between ranks (see
// parallel/ring/ for one written by hand) and marks each Work done when they have arrived.
class SelfGroup final : public parallel::ProcessGroup {
 public:
  SelfGroup() : ProcessGroup(/*rank=*/0, /*size=*/1, std::chrono::seconds(30)) {}
  const char* backend_name() const override { return "self"; }
  std::shared_ptr<parallel::Work> all_reduce(const Tensor&, parallel::ReduceOp) override { return done("all_reduce"); }
  std::shared_ptr<parallel::Work> broadcast(const Tensor&, int) override { return done("broadcast"); }
  std::shared_ptr<parallel::Work> all_gather(const std::vector<Tensor>& outputs, const Tensor& input) override {
    outputs[0].copy_(input);
    return done("all_gather");
  }
  std::shared_ptr<parallel::Work> reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                                 parallel::ReduceOp) override {
    output.copy_(inputs[0]);
    return done("reduce_scatter");
  }
  std::shared_ptr<parallel::Work> barrier() override { return done("barrier"); }

 private:
  static std::shared_ptr<parallel::Work> done(const char* what) {
    auto work = std::make_shared<parallel::Work>(what);
    work->mark_started();
    work->mark_done();
    return work;
  }
};
// [/self_group]

bool close(const Tensor& a, const Tensor& b) { return sum((a - b) * (a - b)).item() < 1e-8; }

}  // namespace

int main() {
  // The compute backend, called the way core's ops call one.
  CountingBackend counting;
  Tensor x = randn({4, 3}), w = randn({5, 3}), y = empty({4, 5});
  GemmArgs args;
  args.m = 4, args.n = 5, args.k = 3;
  args.a = x.data(), args.lda = 3;
  args.b = w.data(), args.ldb = 3, args.trans_b = true;
  args.c = y.data(), args.ldc = 5;
  counting.gemm(args, /*stream=*/nullptr);
  const bool gemm_ok = counting.calls["gemm"] == 1 && close(y, matmul(x, w.t()));

  // [register_backend]
  parallel::register_process_group_backend("self", [](const parallel::BackendContext& context) {
    RINGGRAD_CHECK(context.info.world_size == 1, "self: a job of one process only, got ", context.info.world_size);
    return std::make_shared<SelfGroup>();
  });
  auto group = parallel::init_process_group("self", parallel::InitOptions().rank(0).world_size(1));
  Tensor grad = ones({3});
  group->all_reduce(grad)->wait();  // the sum over one rank
  // [/register_backend]
  const bool group_ok = std::string(group->backend_name()) == "self" && close(grad, ones({3}));
  parallel::destroy_process_group();

  std::printf("counting backend: %d gemm call(s), %s; \"self\" process group: %s\n", counting.calls["gemm"],
              gemm_ok ? "result agrees with matmul" : "WRONG RESULT", group_ok ? "all_reduce done" : "WRONG");
  return gemm_ok && group_ok ? 0 : 1;
}
