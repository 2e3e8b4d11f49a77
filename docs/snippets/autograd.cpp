// docs/snippets/autograd.cpp: the examples of docs/autograd.md -- a custom op with its own node,
// the diamond, accumulation into .grad, hooks and final callbacks -- each checked.
#include <string>
#include <vector>

#include "mlp.h"

using namespace ringgrad;
using snippets::expect;

// [custom_op]
// square: y = x * x,  dy/dx = 2x.  The backward needs x, so the forward saves it.
struct SquareBackward final : Node {
  SavedTensor x;  // stored detached, so the graph never points back at itself
  const char* name() const override { return "SquareBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    return {grad_outputs[0] * x.unpack() * 2.0};  // one gradient per input (per edge)
  }
};

Tensor square(const Tensor& x) {
  Tensor y;
  {
    NoGradGuard no_grad;  // the ops inside must not record nodes of their own
    y = x * x;
  }
  if (needs_grad(x)) record<SquareBackward>(y, {x}).x = save(x);  // node, edge to x, y.grad_fn()
  return y;
}
// [/custom_op]

// [multi_output]
// sum_and_product: two results of one forward, (a + b, a * b). One node receives both gradients.
struct SumAndProductBackward final : Node {
  SavedTensor a, b;
  const char* name() const override { return "SumAndProductBackward"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& g) override {
    // g[0] is the gradient of a + b, g[1] of a * b; either is undefined when its result was unused.
    Tensor da, db;
    if (g[0].defined()) da = db = g[0];
    if (g[1].defined()) {
      const Tensor from_product_a = g[1] * b.unpack(), from_product_b = g[1] * a.unpack();
      da = da.defined() ? da + from_product_a : from_product_a;
      db = db.defined() ? db + from_product_b : from_product_b;
    }
    return {da, db};  // one per input, as always
  }
};

std::vector<Tensor> sum_and_product(const Tensor& a, const Tensor& b) {
  std::vector<Tensor> results;
  {
    NoGradGuard no_grad;
    results = {a + b, a * b};
  }
  if (needs_grad(a, b)) {
    auto& node = record_outputs<SumAndProductBackward>(results, {a, b});  // results[i] is output i
    node.a = save(a);
    node.b = save(b);
  }
  return results;
}
// [/multi_output]

int main() {
  {
    // [gradcheck]
    Tensor x = randn({3, 5}, DType::f64, /*seed=*/7).requires_grad_(true);
    GradcheckResult result = gradcheck([](const Tensor& t) { return square(t); }, x);
    std::cout << (result ? "square: gradient ok\n" : result.report);
    // [/gradcheck]
    expect(result.ok, "gradcheck of square");
    expect(std::string(square(x).grad_fn()->name()) == "SquareBackward", "square records SquareBackward");
  }
  {
    // [diamond]
    Tensor x = from_vector<double>({3.0}).requires_grad_(true);
    Tensor y = x * 2.0 + x * 5.0;  // two paths lead from y back to x
    y.backward();                  // x.grad() is 7: the engine sums what both paths deliver
    // [/diamond]
    expect(x.grad().item() == 7.0, "diamond: 2 + 5");
  }
  {
    // [accumulate]
    Tensor w = from_vector<double>({1.0, 2.0}).requires_grad_(true);
    sum(w * 3.0).backward();
    sum(w * 3.0).backward();  // a second backward adds: w.grad() is {6, 6}
    w.set_grad(Tensor());     // what optimizer.zero_grad() does to every parameter
    // [/accumulate]
    expect(!w.grad().defined(), "set_grad(Tensor()) clears .grad");
  }
  {
    // [hooks]
    Tensor w = from_vector<double>({1.0, 2.0}).requires_grad_(true);
    std::vector<std::string> log;
    // A tensor hook sees the gradient before it is used and may replace it: here it halves it.
    w.register_hook([](const Tensor& grad) { return grad * 0.5; });
    // A post-accumulate hook runs right after w.grad() was updated (DDP marks w ready here). From
    // inside backward it may queue a final callback, which runs once the whole graph is done.
    w.register_post_accumulate_grad_hook([&log](const Tensor& leaf) {
      log.push_back("accumulated");
      queue_callback([&log] { log.push_back("final callback"); });
    });
    sum(w * w).backward();  // w.grad() is 0.5 * 2w = {1, 2}; log: accumulated, final callback
    // [/hooks]
    expect(w.grad().to_vector<double>() == std::vector<double>{1.0, 2.0}, "hook halves the gradient");
    expect(log == std::vector<std::string>{"accumulated", "final callback"}, "hook order");
  }
  {
    // [multi_output_use]
    Tensor a = from_vector<double>({1.0, 2.0}).requires_grad_(true);
    Tensor b = from_vector<double>({3.0, 4.0}).requires_grad_(true);
    std::vector<Tensor> r = sum_and_product(a, b);
    r[1].register_hook([](const Tensor& grad) { return grad * 2.0; });  // on the product only
    sum(r[1]).backward();  // the sum is unused: its gradient reaches the node undefined
    // a.grad() is 2 * b = {6, 8}, b.grad() is 2 * a = {2, 4}
    // [/multi_output_use]
    expect(a.grad().to_vector<double>() == std::vector<double>{6.0, 8.0}, "multi-output: a.grad");
    expect(b.grad().to_vector<double>() == std::vector<double>{2.0, 4.0}, "multi-output: b.grad");
    expect(r[0].output_nr() == 0 && r[1].output_nr() == 1 && r[0].grad_fn() == r[1].grad_fn(), "one node, two outputs");
    a.set_grad(Tensor());
    b.set_grad(Tensor());
    const std::vector<Tensor> both = sum_and_product(a, b);
    sum(both[0] * 3.0 + both[1]).backward();  // both used: 3 + b and 3 + a
    expect(a.grad().to_vector<double>() == std::vector<double>{6.0, 7.0}, "multi-output: both results used");
    expect(b.grad().to_vector<double>() == std::vector<double>{4.0, 5.0}, "multi-output: both results used (b)");
  }
  std::cout << "autograd snippets: all checks passed\n";
  return 0;
}
