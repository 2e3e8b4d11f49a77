// tests/core/test_engine.cpp: the autograd engine -- graph traversal, accumulation, hooks, grad mode,
// final callbacks, retain_graph, and backward across logical CPU devices.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ringgrad/core/autograd/engine.h>
#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/autograd/node.h>
#include <ringgrad/core/device.h>
#include <ringgrad/core/base/error.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>

using namespace ringgrad;
using Catch::Contains;

namespace {

Tensor leaf(const Shape& shape, uint64_t seed) { return randn(shape, DType::f64, seed).requires_grad_(true); }

// Checks a tensor elementwise against expected values.
void check_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-12) {
  REQUIRE(t.defined());
  const std::vector<double> got = t.to(DType::f64).to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(expected[i]).margin(tol));
  }
}

template <typename F>
std::vector<double> map_values(const Tensor& t, F f) {
  std::vector<double> v = t.to_vector<double>();
  for (double& x : v) x = f(x);
  return v;
}

}  // namespace

// ======================================== graph traversal =======================================

TEST_CASE("engine: a diamond graph (x -> a, b -> a + b) sums both paths into x.grad", "[engine]") {
  Tensor x = leaf({3, 4}, 1);
  Tensor a = x * 3.0;
  Tensor b = tanh(x);
  sum(a + b).backward();
  check_values(x.grad(), map_values(x, [](double v) { return 3.0 + 1.0 - std::tanh(v) * std::tanh(v); }));
}

TEST_CASE("engine: a two-level diamond waits for both branches before running the shared node", "[engine]") {
  // f = sum(2h * e^h), h = x^2:  df/dx = (2 e^h + 2h e^h) * 2x
  Tensor x = leaf({5, 3}, 2);
  Tensor h = x * x;
  Tensor a = h * 2.0;
  Tensor b = exp(h);
  sum(a * b).backward();
  check_values(x.grad(),
               map_values(x,
                          [](double v) {
                            const double h = v * v;
                            return (2.0 * std::exp(h) + 2.0 * h * std::exp(h)) * 2.0 * v;
                          }),
               1e-9);
}

TEST_CASE("engine: a leaf reached along four paths gets the sum of their gradients", "[engine]") {
  Tensor x = leaf({3, 5}, 3);
  sum(x + x + x * 2.0).backward();
  check_values(x.grad(), std::vector<double>(15, 4.0));
}

TEST_CASE("engine: inputs that do not require grad get no gradient and no edge", "[engine]") {
  Tensor x = leaf({3, 4}, 4);
  Tensor c = randn({3, 4}, DType::f64, 5);
  Tensor y = x * c;
  CHECK(y.requires_grad());
  REQUIRE(y.grad_fn());
  REQUIRE(y.grad_fn()->next_edges.size() == 2);
  CHECK(y.grad_fn()->next_edges[0].valid());
  CHECK_FALSE(y.grad_fn()->next_edges[1].valid());
  CHECK(y.grad_fn()->next_edges[0].node == x.grad_accumulator());
  sum(y).backward();
  check_values(x.grad(), c.to_vector<double>());
  CHECK_FALSE(c.grad().defined());

  Tensor d = c * c;
  CHECK_FALSE(d.requires_grad());
  CHECK_FALSE(d.grad_fn());
}

TEST_CASE("engine: leaves and outputs report is_leaf, requires_grad and grad_fn", "[engine]") {
  Tensor x = leaf({2, 3}, 6);
  Tensor plain = zeros({2, 3});
  Tensor y = tanh(x);
  CHECK(x.is_leaf());
  CHECK(x.requires_grad());
  CHECK_FALSE(x.grad_fn());
  CHECK(plain.is_leaf());
  CHECK_FALSE(plain.requires_grad());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.requires_grad());
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() != nullptr);
  CHECK_FALSE(x.grad().defined());  // before any backward
  CHECK(x.grad_accumulator() == x.grad_accumulator());
}

TEST_CASE("engine: a leaf on cpu:1 gets its gradient on cpu:1", "[engine]") {
  REQUIRE(cpu_device_count() >= 2);
  Tensor x = randn({3, 5}, TensorOptions(DType::f64).device(Device::cpu(1)), 7).requires_grad_(true);
  sum(x * x).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device() == Device::cpu(1));
  check_values(x.grad(), map_values(x, [](double v) { return 2.0 * v; }));
}

// ========================================== accumulation ========================================

TEST_CASE("engine: gradients accumulate over two backward calls (the grad doubles)", "[engine]") {
  Tensor x = leaf({3, 4}, 8);
  sum(x * 3.0).backward();
  check_values(x.grad(), std::vector<double>(12, 3.0));
  sum(x * 3.0).backward();
  check_values(x.grad(), std::vector<double>(12, 6.0));
}

TEST_CASE("engine: accumulating after sum's broadcast gradient keeps correct values", "[engine]") {
  // sum's backward may hand out an expanded (stride-0) gradient; .grad must not alias it.
  Tensor x = leaf({3, 4}, 9);
  sum(x).backward();
  sum(x).backward();
  sum(x * 2.0).backward();
  check_values(x.grad(), std::vector<double>(12, 4.0));
}

TEST_CASE("engine: set_grad replaces the accumulated gradient", "[engine]") {
  Tensor x = leaf({3, 4}, 10);
  sum(x * 3.0).backward();
  x.set_grad(Tensor());
  CHECK_FALSE(x.grad().defined());
  sum(x * 3.0).backward();
  check_values(x.grad(), std::vector<double>(12, 3.0));
  x.set_grad(full({3, 4}, 1.0, DType::f64));
  sum(x * 3.0).backward();
  check_values(x.grad(), std::vector<double>(12, 4.0));
}

TEST_CASE("engine: backward with an explicit gradient on a non-scalar output", "[engine]") {
  Tensor x = leaf({3, 4}, 11);
  Tensor y = x * 2.0;
  y.backward(full({3, 4}, 0.5, DType::f64));
  check_values(x.grad(), std::vector<double>(12, 1.0));
}

TEST_CASE("engine: backward on a non-scalar output without a gradient throws", "[engine]") {
  Tensor x = leaf({3, 4}, 12);
  Tensor y = x * 2.0;
  CHECK_THROWS_AS(y.backward(), Error);
}

TEST_CASE("engine: backward on a tensor that does not require grad throws", "[engine]") {
  Tensor x = randn({3, 4}, DType::f64, 13);
  CHECK_THROWS_AS(sum(x).backward(), Error);
}

TEST_CASE("engine: run_backward with several roots sums their gradients", "[engine]") {
  Tensor x = leaf({3, 4}, 14);
  Tensor y1 = sum(x * 2.0);
  Tensor y2 = x * 3.0;
  run_backward({y1, y2}, {Tensor(), full({3, 4}, 2.0, DType::f64)}, false);
  check_values(x.grad(), std::vector<double>(12, 8.0));
}

// ============================================ hooks =============================================

TEST_CASE("hooks on a non-leaf run in registration order and can replace the gradient", "[engine]") {
  Tensor x = leaf({3, 4}, 15);
  Tensor h = x * 2.0;
  std::vector<std::string> order;
  std::vector<double> seen_by_second;
  h.register_hook([&](const Tensor& g) {
    order.push_back("first");
    return g * 10.0;
  });
  h.register_hook([&](const Tensor& g) {
    order.push_back("second");
    seen_by_second = g.to_vector<double>();
    return Tensor();  // keep the gradient as it is
  });
  sum(h).backward();
  CHECK(order == std::vector<std::string>{"first", "second"});
  CHECK(seen_by_second == std::vector<double>(12, 10.0));
  check_values(x.grad(), std::vector<double>(12, 20.0));
}

TEST_CASE("hooks on a leaf run in registration order and replace what is accumulated", "[engine]") {
  Tensor x = leaf({3, 4}, 16);
  std::vector<std::string> order;
  std::vector<double> seen_by_second;
  x.register_hook([&](const Tensor& g) {
    order.push_back("first");
    return g * 10.0;
  });
  x.register_hook([&](const Tensor& g) {
    order.push_back("second");
    seen_by_second = g.to_vector<double>();
    return g + 1.0;
  });
  sum(x * 2.0).backward();
  CHECK(order == std::vector<std::string>{"first", "second"});
  CHECK(seen_by_second == std::vector<double>(12, 20.0));
  check_values(x.grad(), std::vector<double>(12, 21.0));
}

TEST_CASE("hooks on a non-leaf see the summed gradient of all its uses, once", "[engine]") {
  Tensor x = leaf({3, 4}, 17);
  Tensor h = x * 1.0;
  int calls = 0;
  std::vector<double> seen;
  h.register_hook([&](const Tensor& g) {
    ++calls;
    seen = g.to_vector<double>();
    return Tensor();
  });
  sum(h * 2.0 + h * 3.0).backward();
  CHECK(calls == 1);
  CHECK(seen == std::vector<double>(12, 5.0));
}

TEST_CASE("post-accumulate hooks run after .grad is set and see the accumulated value", "[engine]") {
  Tensor x = leaf({3, 4}, 18);
  int calls = 0;
  std::vector<double> seen;
  bool same_leaf = false;
  x.register_post_accumulate_grad_hook([&](const Tensor& l) {
    ++calls;
    same_leaf = l.same(x) || l.storage() == x.storage();
    REQUIRE(l.grad().defined());
    seen = l.grad().to_vector<double>();
  });
  sum(x * 3.0).backward();
  CHECK(calls == 1);
  CHECK(same_leaf);
  CHECK(seen == std::vector<double>(12, 3.0));
  sum(x * 3.0).backward();
  CHECK(calls == 2);
  CHECK(seen == std::vector<double>(12, 6.0));
}

TEST_CASE("post-accumulate hooks run once per backward for a leaf used twice, after the tensor hooks", "[engine]") {
  Tensor x = leaf({3, 4}, 19);
  std::vector<std::string> order;
  std::vector<double> seen;
  x.register_post_accumulate_grad_hook([&](const Tensor& l) {
    order.push_back("post");
    seen = l.grad().to_vector<double>();
  });
  x.register_hook([&](const Tensor& g) {
    order.push_back("tensor hook");
    return g * 10.0;
  });
  sum(x * 2.0 + x * 3.0).backward();
  CHECK(order == std::vector<std::string>{"tensor hook", "post"});
  CHECK(seen == std::vector<double>(12, 50.0));
}

TEST_CASE("an exception thrown in a hook reaches the caller of backward", "[engine]") {
  Tensor x = leaf({3, 4}, 20);
  Tensor h = x * 2.0;
  h.register_hook([](const Tensor&) -> Tensor { throw Error("hook failed on purpose"); });
  CHECK_THROWS_WITH(sum(h).backward(), Contains("hook failed on purpose"));
  // The engine is still usable afterwards.
  Tensor z = leaf({2, 3}, 21);
  sum(z * 4.0).backward();
  check_values(z.grad(), std::vector<double>(6, 4.0));
}

// =========================================== grad mode ==========================================

TEST_CASE("NoGradGuard stops recording and restores the previous mode", "[engine]") {
  Tensor x = leaf({3, 4}, 22);
  REQUIRE(GradMode::is_enabled());
  {
    NoGradGuard no_grad;
    CHECK_FALSE(GradMode::is_enabled());
    Tensor y = tanh(x * 2.0);
    CHECK_FALSE(y.requires_grad());
    CHECK_FALSE(y.grad_fn());
    {
      NoGradGuard nested;
      CHECK_FALSE(GradMode::is_enabled());
    }
    CHECK_FALSE(GradMode::is_enabled());  // the nested guard restored "off", not "on"
  }
  CHECK(GradMode::is_enabled());
  Tensor z = x * 2.0;
  CHECK(z.requires_grad());
  CHECK(z.grad_fn());
}

TEST_CASE("NoGradGuard is per thread", "[engine]") {
  NoGradGuard no_grad;
  bool enabled_elsewhere = false;
  std::thread other([&] { enabled_elsewhere = GradMode::is_enabled(); });
  other.join();
  CHECK(enabled_elsewhere);
  CHECK_FALSE(GradMode::is_enabled());
}

TEST_CASE("detach cuts the graph and shares storage", "[engine]") {
  Tensor x = leaf({3, 4}, 23);
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK_FALSE(d.grad_fn());
  CHECK(d.storage() == x.storage());
  sum(d * 3.0 + x).backward();
  check_values(x.grad(), std::vector<double>(12, 1.0));

  Tensor y = leaf({2, 3}, 24);
  Tensor h = exp(y);
  Tensor cut = h.detach();
  CHECK(cut.is_leaf());
  sum(cut * h).backward();  // d/dy (c * e^y) with c held constant = c e^y
  check_values(y.grad(), map_values(y, [](double v) { return std::exp(v) * std::exp(v); }), 1e-9);
}

// ========================================= final callbacks ======================================

TEST_CASE("final callbacks run on the calling thread after the whole graph, in order", "[engine]") {
  Tensor x = leaf({3, 4}, 25);
  std::vector<std::string> order;
  x.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("post"); });
  Tensor y = sum(x * x + x * 2.0);  // two paths into x
  std::vector<double> grad_at_callback;
  std::thread::id callback_thread;
  run_backward({y}, {Tensor()}, false,
               {[&] {
                  order.push_back("final 1");
                  grad_at_callback = x.grad().to_vector<double>();
                  callback_thread = std::this_thread::get_id();
                },
                [&] { order.push_back("final 2"); }});
  CHECK(order == std::vector<std::string>{"post", "final 1", "final 2"});
  CHECK(callback_thread == std::this_thread::get_id());
  std::vector<double> expected = map_values(x, [](double v) { return 2.0 * v + 2.0; });
  REQUIRE(grad_at_callback.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) CHECK(grad_at_callback[i] == Approx(expected[i]));
}

TEST_CASE("callbacks queued from a hook run after the final callbacks", "[engine]") {
  Tensor x = leaf({3, 4}, 26);
  Tensor h = x * 2.0;
  std::vector<std::string> order;
  std::vector<double> grad_when_queued_ran;
  h.register_hook([&](const Tensor&) {
    order.push_back("hook");
    queue_callback([&] {
      order.push_back("queued");
      grad_when_queued_ran = x.grad().to_vector<double>();
    });
    return Tensor();
  });
  run_backward({sum(h)}, {Tensor()}, false, {[&] { order.push_back("final"); }});
  CHECK(order == std::vector<std::string>{"hook", "final", "queued"});
  CHECK(grad_when_queued_ran == std::vector<double>(12, 2.0));
}

TEST_CASE("callbacks queued from a post-accumulate hook run during Tensor::backward too", "[engine]") {
  Tensor x = leaf({3, 4}, 27);
  int ran = 0;
  x.register_post_accumulate_grad_hook([&](const Tensor&) { queue_callback([&] { ++ran; }); });
  sum(x * 2.0).backward();
  CHECK(ran == 1);
  sum(x * 2.0).backward();
  CHECK(ran == 2);  // queued callbacks are consumed by the backward they ran in
}

TEST_CASE("queue_callback outside backward throws", "[engine]") {
  CHECK_THROWS_AS(queue_callback([] {}), Error);
}

// ========================================== retain_graph ========================================

TEST_CASE("a second backward without retain_graph throws an error that mentions retain_graph", "[engine]") {
  Tensor x = leaf({3, 4}, 28);
  Tensor y = sum(x * x);
  y.backward();
  CHECK_THROWS_AS(y.backward(), Error);
  CHECK_THROWS_WITH(y.backward(), Contains("retain_graph"));
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->released);
}

TEST_CASE("with retain_graph=true a second backward through the same graph works", "[engine]") {
  Tensor x = leaf({3, 4}, 29);
  Tensor y = sum(exp(x) * x);
  y.backward(Tensor(), /*retain_graph=*/true);
  CHECK_FALSE(y.grad_fn()->released);
  y.backward();
  check_values(x.grad(), map_values(x, [](double v) { return 2.0 * (std::exp(v) * v + std::exp(v)); }), 1e-9);
  CHECK_THROWS_WITH(y.backward(), Contains("retain_graph"));
}

// ========================================= memory ===============================================

TEST_CASE("a graph is freed when its outputs go away (saved tensors make no reference cycle)", "[engine]") {
  std::vector<std::weak_ptr<Node>> nodes;
  std::weak_ptr<Node> accumulator;
  {
    Tensor x = leaf({4, 5}, 30);
    Tensor w = leaf({3, 5}, 31);
    Tensor b = leaf({3}, 32);
    const Tensor labels = from_vector<int64_t>({0, 2, 1, 1});
    Generator g(33);
    std::vector<Tensor> outs = {tanh(x),
                                exp(x),
                                sigmoid(x),
                                x * x,
                                matmul(x, w.t()),
                                softmax(x, 1),
                                log_softmax(x, 0),
                                linear(x, w, b),
                                max(x, 1).first,
                                dropout(x, 0.5, true, g),
                                gelu(x, GeluApproximate::Tanh),
                                sqrt(x * x + 1.0),
                                cross_entropy(linear(x, w, b), labels)};
    for (const Tensor& o : outs) {
      REQUIRE(o.grad_fn());
      nodes.push_back(o.grad_fn());
    }
    accumulator = x.grad_accumulator();
    sum(outs.back()).backward(Tensor(), true);
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    INFO("output " << i);
    CHECK(nodes[i].expired());
  }
  CHECK(accumulator.expired());
}

// ========================================= several devices ======================================

TEST_CASE("engine: a graph spanning cpu:0 and cpu:1 gets the right gradient", "[engine]") {
  REQUIRE(cpu_device_count() >= 2);
  Tensor x = leaf({3, 4}, 34);
  Tensor y = x.to(Device::cpu(1));
  CHECK(y.device() == Device::cpu(1));
  Tensor z = sum(y * y);
  CHECK(z.device() == Device::cpu(1));
  Tensor total = z.to(Device::cpu(0)) + sum(x * 3.0);
  total.backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device() == Device::cpu(0));
  check_values(x.grad(), map_values(x, [](double v) { return 2.0 * v + 3.0; }));
}

TEST_CASE("engine: nodes of a graph spanning devices run on their device's worker thread", "[engine]") {
  REQUIRE(cpu_device_count() >= 2);
  std::thread::id worker0, worker1;
  run_on(Device::cpu(0), [&] { worker0 = std::this_thread::get_id(); }).get();
  run_on(Device::cpu(1), [&] { worker1 = std::this_thread::get_id(); }).get();
  REQUIRE(worker0 != worker1);

  struct Seen {
    std::thread::id thread;
    Device device;
  };
  std::mutex mutex;
  std::map<std::string, Seen> seen;
  auto record = [&](const std::string& name) {
    return [&, name](const Tensor&) {
      std::lock_guard<std::mutex> lock(mutex);
      seen[name] = Seen{std::this_thread::get_id(), current_worker_device()};
      return Tensor();
    };
  };

  Tensor x = leaf({3, 4}, 35);         // cpu:0
  Tensor y = x.to(Device::cpu(1));     // node on cpu:1
  Tensor yy = y * y;                   // cpu:1
  Tensor z = sum(yy);                  // cpu:1
  Tensor back = z.to(Device::cpu(0));  // node on cpu:0
  Tensor u = x * 3.0;                  // cpu:0
  Tensor total = back + sum(u);
  y.register_hook(record("y"));
  yy.register_hook(record("yy"));
  z.register_hook(record("z"));
  back.register_hook(record("back"));
  u.register_hook(record("u"));
  total.backward();

  check_values(x.grad(), map_values(x, [](double v) { return 2.0 * v + 3.0; }));
  REQUIRE(seen.size() == 5);
  for (const char* name : {"y", "yy", "z"}) {
    INFO("hook on " << name);
    CHECK(seen[name].device == Device::cpu(1));
    CHECK(seen[name].thread == worker1);
  }
  for (const char* name : {"back", "u"}) {
    INFO("hook on " << name);
    CHECK(seen[name].device == Device::cpu(0));
    CHECK(seen[name].thread == worker0);
  }
  CHECK(worker1 != std::this_thread::get_id());
}

TEST_CASE("engine: final and queued callbacks of a multi-device backward run on the caller", "[engine]") {
  REQUIRE(cpu_device_count() >= 3);
  Tensor x = leaf({3, 4}, 36);
  Tensor y = x.to(Device::cpu(2)) * 2.0;
  std::mutex mutex;
  std::vector<std::string> order;
  std::thread::id final_thread, queued_thread;
  y.register_hook([&](const Tensor&) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back("hook");
    }
    queue_callback([&] {
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back("queued");
      queued_thread = std::this_thread::get_id();
    });
    return Tensor();
  });
  x.register_post_accumulate_grad_hook([&](const Tensor&) {
    std::lock_guard<std::mutex> lock(mutex);
    order.push_back("post");
  });
  run_backward({sum(y).to(Device::cpu(0))}, {Tensor()}, false, {[&] {
                 std::lock_guard<std::mutex> lock(mutex);
                 order.push_back("final");
                 final_thread = std::this_thread::get_id();
               }});
  CHECK(order == std::vector<std::string>{"hook", "post", "final", "queued"});
  CHECK(final_thread == std::this_thread::get_id());
  CHECK(queued_thread == std::this_thread::get_id());
  check_values(x.grad(), std::vector<double>(12, 2.0));
}

TEST_CASE("engine: an exception in a hook on another device's worker reaches the caller", "[engine]") {
  REQUIRE(cpu_device_count() >= 2);
  Tensor x = leaf({3, 4}, 37);
  Tensor y = x.to(Device::cpu(1)) * 2.0;
  y.register_hook([](const Tensor&) -> Tensor { throw Error("worker hook failed on purpose"); });
  CHECK_THROWS_WITH(sum(y).to(Device::cpu(0)).backward(), Contains("worker hook failed on purpose"));
  // The workers are still usable afterwards.
  Tensor z = leaf({2, 3}, 38);
  sum((z.to(Device::cpu(1)) * 4.0).to(Device::cpu(0))).backward();
  check_values(z.grad(), std::vector<double>(6, 4.0));
}

TEST_CASE("engine: two threads can run backward on independent graphs at the same time", "[engine]") {
  REQUIRE(cpu_device_count() >= 2);
  auto train = [](int which, std::vector<double>* grad) {
    Tensor x = leaf({5, 3}, 40 + which);
    for (int step = 0; step < 50; ++step) {
      // One graph stays on cpu:0, the other crosses to cpu:1 and back.
      Tensor h = which == 0 ? tanh(x) : tanh(x.to(Device::cpu(1))).to(Device::cpu(0));
      sum(h * 2.0).backward();
    }
    *grad = x.grad().to_vector<double>();
  };
  std::vector<double> g0, g1;
  std::thread t0(train, 0, &g0), t1(train, 1, &g1);
  t0.join();
  t1.join();
  for (int which = 0; which < 2; ++which) {
    const Tensor x = randn({5, 3}, DType::f64, 40 + which);
    const std::vector<double> expected =
        map_values(x, [](double v) { return 50 * 2.0 * (1.0 - std::tanh(v) * std::tanh(v)); });
    const std::vector<double>& got = which == 0 ? g0 : g1;
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(expected[i]).epsilon(1e-12));
  }
}

TEST_CASE("engine: leaves that receive the same gradient tensor get separate .grad memory", "[engine]") {
  // add's backward hands one tensor to both inputs; AccumulateGrad may keep an incoming gradient
  // only when nothing else holds it, so here at least one of the two must be a copy.
  Tensor a = ones({3, 4}).requires_grad_(true);
  Tensor b = ones({3, 4}).requires_grad_(true);
  sum(a + b).backward();
  REQUIRE(a.grad().defined());
  REQUIRE(b.grad().defined());
  CHECK(a.grad().storage() != b.grad().storage());
  CHECK(a.grad().to_vector<float>() == std::vector<float>(12, 1.0f));
  // A gradient kept without a copy is still the leaf's alone: changing it leaves the other intact.
  {
    NoGradGuard no_grad;
    a.grad().copy_(zeros({3, 4}));
  }
  CHECK(b.grad().to_vector<float>() == std::vector<float>(12, 1.0f));
}
