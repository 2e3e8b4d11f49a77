// tests/nn/test_module.cpp: nn::Module -- registration and dotted names, traversal, train/eval,
// to(device)/to(dtype) in place, zero_grad, state_dict round trips and strict-mode errors, clone().
//
// The user model below is written the way nn/module.h tells users to write one: derive from
// nn::Cloneable<Self>, create and register everything in reset(), keep typed members (model->fc1).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/device.h>
#include <ringgrad/core/generator.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/activation.h>
#include <ringgrad/nn/layernorm.h>
#include <ringgrad/nn/linear.h>
#include <ringgrad/nn/module.h>
#include <ringgrad/nn/sequential.h>

using namespace ringgrad;

namespace {

// A nested block: a Linear, a LayerNorm, a floating buffer and an integer buffer.
struct Block : nn::Cloneable<Block> {
  explicit Block(int64_t n) : n(n) { reset(); }
  void reset() override {
    lin = register_module("lin", std::make_shared<nn::Linear>(n, n));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(n));
    running = register_buffer("running", zeros({n}));
    count = register_buffer("count", zeros({1}, DType::i64));
  }
  std::string type_name() const override { return "Block"; }
  Tensor forward(const Tensor& x) override { return norm->forward(tanh(lin->forward(x))); }

  int64_t n;
  std::shared_ptr<nn::Linear> lin;
  std::shared_ptr<nn::LayerNorm> norm;
  Tensor running, count;
};

// The user model: a direct parameter, two Linears around a nested Block, and a Dropout.
struct Mlp : nn::Cloneable<Mlp> {
  Mlp(int64_t in, int64_t hidden, int64_t out) : in(in), hidden(hidden), out(out) { reset(); }
  void reset() override {
    scale = register_parameter("scale", ones({out}));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, hidden));
    block = register_module("block", std::make_shared<Block>(hidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, out));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.5));
  }
  std::string type_name() const override { return "Mlp"; }
  Tensor forward(const Tensor& x) override {
    return fc2->forward(drop->forward(block->forward(tanh(fc1->forward(x))))) * scale;
  }

  int64_t in, hidden, out;
  Tensor scale;
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<Block> block;
  std::shared_ptr<nn::Dropout> drop;
};

// A module that registers its tensors in the constructor but has neither reset() nor Cloneable.
struct Plain : nn::Module {
  Plain() { w = register_parameter("w", ones({3})); }
  std::string type_name() const override { return "Plain"; }
  Tensor w;
};

// Cloneable, but registers in its constructor instead of reset(): clone() cannot re-create it.
struct NoReset : nn::Cloneable<NoReset> {
  NoReset() { w = register_parameter("w", ones({3})); }
  std::string type_name() const override { return "NoReset"; }
  Tensor w;
};

std::shared_ptr<Mlp> make_model(uint64_t seed, int64_t in = 7, int64_t hidden = 5, int64_t out = 3) {
  manual_seed(seed);
  return std::make_shared<Mlp>(in, hidden, out);
}

template <typename T>
std::vector<std::string> names_of(const nn::Named<T>& named) {
  std::vector<std::string> out;
  for (const auto& entry : named) out.push_back(entry.first);
  return out;
}

template <typename T>
T lookup(const nn::Named<T>& named, const std::string& name) {
  for (const auto& entry : named)
    if (entry.first == name) return entry.second;
  FAIL("no entry named " << name);
  return T();
}

// Element values as doubles, whatever the floating dtype (copies to cpu:0 if needed).
std::vector<double> values(const Tensor& t) { return t.to(Device::cpu(0)).to(DType::f64).to_vector<double>(); }

// Bitwise equality of two tensors' contents (same dtype and shape required).
bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.to(Device::cpu(0)).contiguous(), cb = b.to(Device::cpu(0)).contiguous();
  return std::memcmp(ca.data(), cb.data(), static_cast<size_t>(ca.numel() * ca.element_size())) == 0;
}

// One forward and backward so that every parameter on the path has a gradient.
void run_backward_once(Mlp& model, Device device = Device::cpu(0), DType dtype = DType::f32) {
  Tensor x = randn({4, model.in}, TensorOptions(dtype).device(device), /*seed=*/11);
  sum(model.forward(x)).backward();
}

const std::vector<std::string> kParamNames = {
    "scale",           "fc1.weight", "fc1.bias", "block.lin.weight", "block.lin.bias", "block.norm.weight",
    "block.norm.bias", "fc2.weight", "fc2.bias"};

}  // namespace

// --- registration and naming -------------------------------------------------------------------------

TEST_CASE("named_parameters: dotted names in registration order, own parameters first", "[nn]") {
  auto model = make_model(1);
  CHECK(names_of(model->named_parameters()) == kParamNames);
  // Without recursion only the model's own parameters.
  CHECK(names_of(model->named_parameters(/*recurse=*/false)) == std::vector<std::string>{"scale"});
  CHECK(names_of(model->block->named_parameters()) ==
        std::vector<std::string>{"lin.weight", "lin.bias", "norm.weight", "norm.bias"});
}

TEST_CASE("parameters: the same tensors as named_parameters, in the same order", "[nn]") {
  auto model = make_model(1);
  const auto named = model->named_parameters();
  const auto params = model->parameters();
  REQUIRE(params.size() == named.size());
  for (size_t i = 0; i < params.size(); ++i) CHECK(params[i].same(named[i].second));
  CHECK(model->parameters(/*recurse=*/false).size() == 1);
}

TEST_CASE("typed access: model->fc1->weight is the registered parameter", "[nn]") {
  auto model = make_model(1);
  const auto named = model->named_parameters();
  CHECK(model->fc1->weight.same(lookup(named, "fc1.weight")));
  CHECK(model->fc1->bias.same(lookup(named, "fc1.bias")));
  CHECK(model->block->lin->weight.same(lookup(named, "block.lin.weight")));
  CHECK(model->block->norm->bias.same(lookup(named, "block.norm.bias")));
  CHECK(model->scale.same(lookup(named, "scale")));
  CHECK(model->block->running.same(lookup(model->named_buffers(), "block.running")));
  // Modules too: the member and the registry hold the same object.
  CHECK(model->fc1 == lookup(model->named_modules(), "fc1"));
  CHECK(model->block->norm == lookup(model->named_modules(), "block.norm"));
}

TEST_CASE("named_buffers: dotted names, not among the parameters", "[nn]") {
  auto model = make_model(1);
  CHECK(names_of(model->named_buffers()) == std::vector<std::string>{"block.running", "block.count"});
  CHECK(model->named_buffers(/*recurse=*/false).empty());
  for (const auto& [name, b] : model->named_buffers()) {
    INFO(name);
    CHECK_FALSE(b.requires_grad());
  }
  CHECK(lookup(model->named_buffers(), "block.count").dtype() == DType::i64);
}

TEST_CASE("children and named_modules: direct children and the depth-first tree", "[nn]") {
  auto model = make_model(1);
  CHECK(names_of(model->named_children()) == std::vector<std::string>{"fc1", "block", "fc2", "drop"});
  const auto kids = model->children();
  REQUIRE(kids.size() == 4);
  CHECK(kids[0] == model->fc1);
  CHECK(kids[1] == model->block);
  CHECK(kids[2] == model->fc2);
  CHECK(kids[3] == model->drop);
  const auto modules = model->named_modules();
  CHECK(names_of(modules) == std::vector<std::string>{"", "fc1", "block", "block.lin", "block.norm", "fc2", "drop"});
  CHECK(modules[0].second.get() == model.get());
  CHECK(model->fc1->children().empty());
}

TEST_CASE("apply: visits every descendant, children before their parent", "[nn]") {
  auto model = make_model(1);
  std::vector<std::string> visited;
  model->apply([&](nn::Module& m) { visited.push_back(m.type_name()); });
  CHECK(visited == std::vector<std::string>{"Linear", "Linear", "LayerNorm", "Block", "Linear", "Dropout", "Mlp"});
  // apply can change state, e.g. re-initialise every Linear's bias.
  model->apply([](nn::Module& m) {
    if (auto* lin = dynamic_cast<nn::Linear*>(&m)) {
      NoGradGuard no_grad;
      lin->bias.copy_(zeros(lin->bias.shape()));
    }
  });
  for (const auto& name : {"fc1.bias", "block.lin.bias", "fc2.bias"})
    for (double v : values(lookup(model->named_parameters(), name))) CHECK(v == 0.0);
}

TEST_CASE("register: duplicate names throw, whatever kind holds the name", "[nn]") {
  auto m = std::make_shared<nn::Module>();
  m->register_parameter("w", ones({2}));
  m->register_buffer("b", zeros({2}));
  m->register_module("sub", std::make_shared<nn::ReLU>());
  CHECK_THROWS_WITH(m->register_parameter("w", ones({2})), Catch::Contains("'w' is already registered"));
  CHECK_THROWS_AS(m->register_buffer("w", ones({2})), Error);
  CHECK_THROWS_AS(m->register_module("w", std::make_shared<nn::ReLU>()), Error);
  CHECK_THROWS_AS(m->register_parameter("b", ones({2})), Error);
  CHECK_THROWS_AS(m->register_parameter("sub", ones({2})), Error);
  CHECK_THROWS_AS(m->register_module("sub", std::make_shared<nn::ReLU>()), Error);
  // Nothing was added by the failed calls.
  CHECK(m->named_parameters().size() == 1);
  CHECK(m->named_buffers().size() == 1);
  CHECK(m->children().size() == 1);
}

TEST_CASE("register: names containing a dot, or empty, throw", "[nn]") {
  auto m = std::make_shared<nn::Module>();
  CHECK_THROWS_WITH(m->register_parameter("fc1.weight", ones({2})), Catch::Contains("without '.'"));
  CHECK_THROWS_AS(m->register_buffer("a.b", ones({2})), Error);
  CHECK_THROWS_AS(m->register_module("a.b", std::make_shared<nn::ReLU>()), Error);
  CHECK_THROWS_AS(m->register_parameter("", ones({2})), Error);
  CHECK_THROWS_AS(m->register_parameter("undef", Tensor()), Error);
  CHECK_THROWS_AS(m->register_module("null", std::shared_ptr<nn::Module>()), Error);
  CHECK(m->named_parameters().empty());
  CHECK(m->children().empty());
}

TEST_CASE("register_parameter: makes a leaf that requires grad", "[nn]") {
  auto m = std::make_shared<nn::Module>();
  // From a plain tensor.
  Tensor p = m->register_parameter("p", ones({3}));
  CHECK(p.is_leaf());
  CHECK(p.requires_grad());
  // From a non-leaf: cut from its graph.
  Tensor src = randn({3}, DType::f32, 5).requires_grad_(true);
  Tensor q = m->register_parameter("q", src * 2.0);
  CHECK(q.is_leaf());
  CHECK(q.requires_grad());
  CHECK(q.grad_fn() == nullptr);
  CHECK(values(q) == values(src * 2.0));
  // Frozen on request.
  Tensor r = m->register_parameter("r", ones({3}), /*requires_grad=*/false);
  CHECK(r.is_leaf());
  CHECK_FALSE(r.requires_grad());
  // The returned handle is the registered tensor.
  CHECK(p.same(lookup(m->named_parameters(), "p")));
  CHECK(q.same(lookup(m->named_parameters(), "q")));
  // A gradient reaches it.
  sum(p * 3.0).backward();
  REQUIRE(p.grad().defined());
  CHECK(values(p.grad()) == std::vector<double>{3.0, 3.0, 3.0});
}

// --- train / eval, dropout, zero_grad -----------------------------------------------------------------

TEST_CASE("train and eval: propagate to every submodule", "[nn]") {
  auto model = make_model(1);
  for (const auto& [name, m] : model->named_modules()) CHECK(m->is_training());
  model->eval();
  for (const auto& [name, m] : model->named_modules()) {
    INFO(name);
    CHECK_FALSE(m->is_training());
  }
  model->train();
  for (const auto& [name, m] : model->named_modules()) {
    INFO(name);
    CHECK(m->is_training());
  }
  model->train(false);
  CHECK_FALSE(model->block->norm->is_training());
}

TEST_CASE("Dropout: identity in eval mode, masks and rescales in training", "[nn]") {
  auto drop = std::make_shared<nn::Dropout>(0.5);
  Tensor x = rand({13, 17}, DType::f32, 3) + 1.0;  // all in [1, 2): a zero can only come from the mask
  drop->eval();
  Tensor y = drop->forward(x);
  CHECK(bitwise_equal(y, x));

  drop->train();
  manual_seed(42);
  const std::vector<double> in = values(x), out = values(drop->forward(x));
  int zeros_seen = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (out[i] == 0.0) {
      ++zeros_seen;
    } else {
      CHECK(out[i] == Approx(in[i] * 2.0));
    }
  }
  CHECK(zeros_seen > 0);
  CHECK(zeros_seen < static_cast<int>(in.size()));

  // Eval on the parent model reaches a Dropout inside a Sequential.
  auto seq = std::make_shared<nn::Sequential>(
      std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<nn::ReLU>(), drop});
  seq->eval();
  CHECK(bitwise_equal(seq->forward(x), x));
}

TEST_CASE("Dropout: p outside 0 to 1 throws", "[nn]") {
  CHECK_THROWS_AS(nn::Dropout(-0.1), Error);
  CHECK_THROWS_AS(nn::Dropout(1.5), Error);
}

TEST_CASE("zero_grad: clears every parameter's gradient", "[nn]") {
  auto model = make_model(1);
  model->eval();  // no dropout: every parameter is on the path
  run_backward_once(*model);
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    CHECK(p.grad().defined());
  }
  model->zero_grad();
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    CHECK_FALSE(p.grad().defined());
  }
  // Gradients after zero_grad are those of the new backward alone, not accumulated.
  run_backward_once(*model);
  const std::vector<double> first = values(model->fc1->weight.grad());
  model->zero_grad();
  run_backward_once(*model);
  CHECK(values(model->fc1->weight.grad()) == first);
}

// --- to(device), to(dtype) ------------------------------------------------------------------------------

TEST_CASE("to device: moves parameters, gradients and buffers in place", "[nn]") {
  REQUIRE(cpu_device_count() >= 2);
  auto model = make_model(1);
  model->eval();
  run_backward_once(*model);
  // Handles taken before the move, the way an optimizer keeps them.
  const std::vector<Tensor> held = model->parameters();
  const Tensor held_running = model->block->running;
  std::vector<std::vector<double>> before, grads_before;
  for (const Tensor& p : held) {
    before.push_back(values(p));
    grads_before.push_back(values(p.grad()));
  }

  model->to(Device::cpu(1));
  const auto named = model->named_parameters();
  for (size_t i = 0; i < held.size(); ++i) {
    INFO(named[i].first);
    CHECK(held[i].same(named[i].second));
    CHECK(held[i].device() == Device::cpu(1));
    CHECK(held[i].is_leaf());
    CHECK(held[i].requires_grad());
    CHECK(values(held[i]) == before[i]);
    REQUIRE(held[i].grad().defined());
    CHECK(held[i].grad().device() == Device::cpu(1));
    CHECK(values(held[i].grad()) == grads_before[i]);
  }
  CHECK(model->fc1->weight.device() == Device::cpu(1));
  CHECK(held_running.device() == Device::cpu(1));
  CHECK(model->block->count.device() == Device::cpu(1));

  // Training continues on the new device: a backward there accumulates into the moved gradients.
  run_backward_once(*model, Device::cpu(1));
  for (size_t i = 0; i < held.size(); ++i) {
    INFO(named[i].first);
    CHECK(held[i].grad().device() == Device::cpu(1));
    const std::vector<double> g = values(held[i].grad());
    for (size_t j = 0; j < g.size(); ++j) CHECK(g[j] == Approx(2.0 * grads_before[i][j]).margin(1e-6));
  }

  // A second move works the same way.
  model->to(Device::cpu(3));
  for (const Tensor& p : held) CHECK(p.device() == Device::cpu(3));
}

TEST_CASE("to dtype: converts floating parameters, gradients and buffers in place", "[nn]") {
  auto model = make_model(1);
  model->eval();
  run_backward_once(*model);
  const std::vector<Tensor> held = model->parameters();
  std::vector<std::vector<double>> before;
  for (const Tensor& p : held) before.push_back(values(p));

  model->to(DType::f64);
  for (size_t i = 0; i < held.size(); ++i) {
    CHECK(held[i].dtype() == DType::f64);
    CHECK(held[i].requires_grad());
    CHECK(values(held[i]) == before[i]);  // f32 -> f64 is exact
    REQUIRE(held[i].grad().defined());
    CHECK(held[i].grad().dtype() == DType::f64);
  }
  CHECK(model->block->running.dtype() == DType::f64);
  CHECK(model->block->count.dtype() == DType::i64);  // integer buffers keep their dtype
  // The model runs in float64 now.
  model->zero_grad();
  run_backward_once(*model, Device::cpu(0), DType::f64);
  CHECK(model->fc1->weight.grad().dtype() == DType::f64);

  CHECK_THROWS_AS(model->to(DType::i64), Error);
}

// --- state_dict / load_state_dict ---------------------------------------------------------------------

TEST_CASE("state_dict: every parameter and buffer, sorted by name, sharing the module's storage", "[nn]") {
  auto model = make_model(1);
  const nn::StateDict sd = model->state_dict();
  std::vector<std::string> keys;
  for (const auto& entry : sd) keys.push_back(entry.first);
  std::vector<std::string> expected = kParamNames;
  expected.push_back("block.running");
  expected.push_back("block.count");
  std::sort(expected.begin(), expected.end());
  CHECK(keys == expected);
  for (const auto& [name, t] : sd) {
    INFO(name);
    CHECK_FALSE(t.requires_grad());
  }
  CHECK(sd.at("fc1.weight").storage() == model->fc1->weight.storage());
  CHECK(sd.at("block.running").storage() == model->block->running.storage());
}

TEST_CASE("load_state_dict: round trip into a differently initialised model is bitwise identical", "[nn]") {
  auto a = make_model(1);
  auto b = make_model(2);
  {
    NoGradGuard no_grad;
    a->block->running.copy_(from_vector<float>({0.5f, -1.25f, 3.0f, 7.0f, 1e-3f}));
    a->block->count.copy_(from_vector<int64_t>({17}));
  }
  REQUIRE_FALSE(bitwise_equal(a->fc1->weight, b->fc1->weight));
  const std::vector<Tensor> held = b->parameters();
  const void* weight_ptr = b->fc1->weight.data();

  b->load_state_dict(a->state_dict());
  const nn::StateDict sa = a->state_dict(), sb = b->state_dict();
  REQUIRE(sa.size() == sb.size());
  for (const auto& [name, t] : sa) {
    INFO(name);
    CHECK(bitwise_equal(sb.at(name), t));
  }
  // In place: the same handles and memory, still trainable leaves.
  const auto named = b->named_parameters();
  for (size_t i = 0; i < held.size(); ++i) {
    CHECK(held[i].same(named[i].second));
    CHECK(held[i].requires_grad());
    CHECK(held[i].is_leaf());
  }
  CHECK(b->fc1->weight.data() == weight_ptr);
  // Values only, not storage: the two models stay independent.
  CHECK(a->fc1->weight.storage() != b->fc1->weight.storage());
  a->eval();
  b->eval();
  Tensor x = randn({3, 7}, DType::f32, 9);
  CHECK(bitwise_equal(a->forward(x), b->forward(x)));
}

TEST_CASE("load_state_dict: converts a float64 state into a float32 model", "[nn]") {
  auto a = make_model(1);
  auto b = make_model(2);
  nn::StateDict sd;
  for (const auto& [name, t] : a->state_dict()) sd.emplace(name, t.dtype() == DType::f32 ? t.to(DType::f64) : t);
  b->load_state_dict(sd);
  CHECK(b->fc1->weight.dtype() == DType::f32);
  CHECK(bitwise_equal(b->fc1->weight, a->fc1->weight));
}

TEST_CASE("load_state_dict: accepts keys prefixed module.", "[nn]") {
  auto a = make_model(1);
  auto b = make_model(2);
  nn::StateDict prefixed;
  for (const auto& [name, t] : a->state_dict()) prefixed.emplace("module." + name, t);
  b->load_state_dict(prefixed);  // strict
  for (const auto& [name, t] : a->state_dict()) {
    INFO(name);
    CHECK(bitwise_equal(b->state_dict().at(name), t));
  }
  // The same key with and without the prefix is ambiguous.
  nn::StateDict both = a->state_dict();
  both.emplace("module.fc1.weight", a->fc1->weight.detach());
  CHECK_THROWS_WITH(b->load_state_dict(both), Catch::Contains("fc1.weight") && Catch::Contains("twice"));
}

TEST_CASE("load_state_dict strict: the error lists all missing keys by name", "[nn]") {
  auto a = make_model(1);
  auto b = make_model(2);
  nn::StateDict sd = a->state_dict();
  sd.erase("fc1.bias");
  sd.erase("block.norm.weight");
  sd.erase("block.count");
  CHECK_THROWS_WITH(b->load_state_dict(sd), Catch::Contains("missing keys") && Catch::Contains("fc1.bias") &&
                                                Catch::Contains("block.norm.weight") &&
                                                Catch::Contains("block.count") && Catch::Contains("Mlp"));
}

TEST_CASE("load_state_dict strict: the error lists all unexpected keys by name", "[nn]") {
  auto a = make_model(1);
  auto b = make_model(2);
  nn::StateDict sd = a->state_dict();
  sd.emplace("fc3.weight", ones({2, 2}));
  sd.emplace("block.extra", ones({1}));
  CHECK_THROWS_WITH(b->load_state_dict(sd), Catch::Contains("unexpected keys") && Catch::Contains("fc3.weight") &&
                                                Catch::Contains("block.extra"));
}

TEST_CASE("load_state_dict strict: a file's names are escaped, and a long list names ten and counts the rest", "[nn]") {
  auto b = make_model(2);
  nn::StateDict sd = b->state_dict();
  // A name that would colour the terminal and start a line of its own, and 1000 more unknown names.
  sd.emplace("evil\x1b[31m\nERROR: fake\\", ones({1}));
  for (int i = 0; i < 1000; ++i) sd.emplace("extra." + std::to_string(1000 + i), ones({1}));
  std::string message;
  try {
    b->load_state_dict(sd);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find('\x1b') == std::string::npos);
  CHECK(message.find("\nERROR") == std::string::npos);
  CHECK_THAT(message, Catch::Contains("unexpected keys: evil\\x1b[31m\\x0aERROR: fake\\\\, extra.1000, extra.1001") &&
                          Catch::Contains(", extra.1008 and 991 more"));
  CHECK(message.size() < 1000);
}

TEST_CASE("load_state_dict strict: the error lists all shape mismatches with both shapes", "[nn]") {
  auto a = make_model(1);
  auto b = make_model(2);
  nn::StateDict sd = a->state_dict();
  sd["fc1.weight"] = ones({5, 8});
  sd["fc2.bias"] = ones({4});
  CHECK_THROWS_WITH(b->load_state_dict(sd), Catch::Contains("shape mismatches") && Catch::Contains("fc1.weight") &&
                                                Catch::Contains("[5, 7]") && Catch::Contains("[5, 8]") &&
                                                Catch::Contains("fc2.bias") && Catch::Contains("[3]") &&
                                                Catch::Contains("[4]"));
}

TEST_CASE("load_state_dict strict: missing, unexpected and mismatched keys are reported together", "[nn]") {
  auto a = make_model(1);
  auto b = make_model(2);
  nn::StateDict sd = a->state_dict();
  sd.erase("scale");
  sd.emplace("head.weight", ones({2}));
  sd["block.lin.weight"] = ones({5, 4});
  CHECK_THROWS_WITH(b->load_state_dict(sd), Catch::Contains("missing keys: scale") &&
                                                Catch::Contains("unexpected keys: head.weight") &&
                                                Catch::Contains("block.lin.weight"));
}

TEST_CASE("load_state_dict: a failing load changes nothing", "[nn]") {
  auto a = make_model(1);
  auto b = make_model(2);
  const nn::StateDict original = b->state_dict();
  std::map<std::string, std::vector<double>> before;
  for (const auto& [name, t] : original) before[name] = values(t);

  // Every key but one fits; the one mismatched shape (sorted last among the loads) aborts the load.
  nn::StateDict sd = a->state_dict();
  sd["scale"] = ones({4});
  CHECK_THROWS_AS(b->load_state_dict(sd), Error);
  CHECK_THROWS_AS(b->load_state_dict(sd, /*strict=*/false), Error);
  sd = a->state_dict();
  sd.erase("fc2.weight");
  CHECK_THROWS_AS(b->load_state_dict(sd), Error);

  for (const auto& [name, t] : b->state_dict()) {
    INFO(name);
    CHECK(values(t) == before[name]);
  }
}

TEST_CASE("load_state_dict non-strict: loads the matching subset and ignores the rest", "[nn]") {
  auto a = make_model(1);
  auto b = make_model(2);
  const std::vector<double> b_fc2 = values(b->fc2->weight);
  const std::vector<double> b_lin = values(b->block->lin->bias);
  nn::StateDict sd;
  sd.emplace("fc1.weight", a->fc1->weight.detach());
  sd.emplace("module.scale", full({3}, 2.5));
  sd.emplace("not.a.key", ones({4}));
  b->load_state_dict(sd, /*strict=*/false);
  CHECK(bitwise_equal(b->fc1->weight, a->fc1->weight));
  CHECK(values(b->scale) == std::vector<double>{2.5, 2.5, 2.5});
  CHECK(values(b->fc2->weight) == b_fc2);
  CHECK(values(b->block->lin->bias) == b_lin);
  // A shape mismatch is still an error without strict.
  nn::StateDict bad;
  bad.emplace("fc1.weight", ones({1, 1}));
  CHECK_THROWS_WITH(b->load_state_dict(bad, /*strict=*/false), Catch::Contains("fc1.weight"));
}

TEST_CASE("load_state_dict: loads into a model on another device and keeps it there", "[nn]") {
  REQUIRE(cpu_device_count() >= 3);
  auto a = make_model(1);
  auto b = make_model(2);
  b->to(Device::cpu(2));
  b->load_state_dict(a->state_dict());
  CHECK(b->fc1->weight.device() == Device::cpu(2));
  CHECK(bitwise_equal(b->fc1->weight, a->fc1->weight));
}

// --- clone --------------------------------------------------------------------------------------------

TEST_CASE("clone: a deep copy with equal values and separate storage", "[nn]") {
  auto model = make_model(1);
  {
    NoGradGuard no_grad;
    model->block->running.copy_(full({5}, 0.75));
    model->block->count.copy_(from_vector<int64_t>({3}));
  }
  auto copy_base = model->clone();
  auto copy = std::dynamic_pointer_cast<Mlp>(copy_base);
  REQUIRE(copy != nullptr);
  REQUIRE(copy.get() != model.get());

  CHECK(names_of(copy->named_parameters()) == kParamNames);
  const nn::StateDict so = model->state_dict(), sc = copy->state_dict();
  REQUIRE(sc.size() == so.size());
  for (const auto& [name, t] : so) {
    INFO(name);
    CHECK(bitwise_equal(sc.at(name), t));
    CHECK(sc.at(name).storage() != t.storage());
  }
  // Typed access in the copy points at the copy's own registered tensors and modules.
  CHECK(copy->fc1 != model->fc1);
  CHECK(copy->block != model->block);
  CHECK(copy->fc1->weight.same(lookup(copy->named_parameters(), "fc1.weight")));
  CHECK(copy->block->lin->weight.same(lookup(copy->named_parameters(), "block.lin.weight")));
  CHECK(copy->block->running.same(lookup(copy->named_buffers(), "block.running")));
  CHECK(copy->fc1 == lookup(copy->named_modules(), "fc1"));
  // Fresh leaves without gradients; the plain members came along.
  for (const Tensor& p : copy->parameters()) {
    CHECK(p.is_leaf());
    CHECK_FALSE(p.grad().defined());
  }
  CHECK(copy->in == 7);
  CHECK(copy->hidden == 5);
  CHECK(copy->out == 3);
  // Same function.
  model->eval();
  copy->eval();
  Tensor x = randn({4, 7}, DType::f32, 21);
  CHECK(bitwise_equal(copy->forward(x), model->forward(x)));
}

TEST_CASE("clone: modifying the copy leaves the original untouched", "[nn]") {
  auto model = make_model(1);
  const nn::StateDict before_sd = model->state_dict();
  std::map<std::string, std::vector<double>> before;
  for (const auto& [name, t] : before_sd) before[name] = values(t);

  auto copy = std::dynamic_pointer_cast<Mlp>(model->clone());
  REQUIRE(copy != nullptr);
  {
    NoGradGuard no_grad;
    for (const Tensor& p : copy->parameters()) p.copy_(full(p.shape(), 9.0));
    copy->block->running.copy_(full({5}, -4.0));
  }
  // Gradients of the copy do not reach the original either.
  copy->eval();
  run_backward_once(*copy);
  CHECK(copy->fc1->weight.grad().defined());
  for (const Tensor& p : model->parameters()) CHECK_FALSE(p.grad().defined());
  // Registering into the copy does not change the original's registry.
  copy->register_buffer("extra", ones({1}));

  for (const auto& [name, t] : model->state_dict()) {
    INFO(name);
    CHECK(values(t) == before[name]);
  }
  CHECK(model->named_buffers().size() == 2);
}

TEST_CASE("clone: preserves requires_grad flags", "[nn]") {
  auto model = make_model(1);
  model->fc1->weight.requires_grad_(false);
  model->block->norm->bias.requires_grad_(false);
  auto copy = model->clone();
  const auto original = model->named_parameters(), copied = copy->named_parameters();
  REQUIRE(copied.size() == original.size());
  for (size_t i = 0; i < copied.size(); ++i) {
    INFO(copied[i].first);
    CHECK(copied[i].second.requires_grad() == original[i].second.requires_grad());
  }
  CHECK_FALSE(lookup(copied, "fc1.weight").requires_grad());
  CHECK(lookup(copied, "fc1.bias").requires_grad());
}

TEST_CASE("clone: preserves device and dtype", "[nn]") {
  REQUIRE(cpu_device_count() >= 3);
  auto model = make_model(1);
  model->to(Device::cpu(2));
  auto copy = model->clone();
  for (const auto& [name, p] : copy->named_parameters()) {
    INFO(name);
    CHECK(p.device() == Device::cpu(2));
  }
  for (const auto& [name, b] : copy->named_buffers()) {
    INFO(name);
    CHECK(b.device() == Device::cpu(2));
  }
  // The copy trains on cpu:2.
  copy->eval();
  Tensor x = randn({2, 7}, TensorOptions(DType::f32).device(Device::cpu(2)), 4);
  sum(copy->forward(x)).backward();
  CHECK(lookup(copy->named_parameters(), "fc1.weight").grad().device() == Device::cpu(2));

  auto model64 = make_model(1);
  model64->to(DType::f64);
  auto copy64 = model64->clone();
  for (const auto& [name, p] : copy64->named_parameters()) {
    INFO(name);
    CHECK(p.dtype() == DType::f64);
    CHECK(p.device() == Device::cpu(0));
  }
  CHECK(lookup(copy64->named_buffers(), "block.count").dtype() == DType::i64);
}

TEST_CASE("clone: preserves the training flag of every submodule", "[nn]") {
  auto model = make_model(1);
  model->eval();
  auto copy = model->clone();
  for (const auto& [name, m] : copy->named_modules()) {
    INFO(name);
    CHECK_FALSE(m->is_training());
  }
  model->train();
  auto copy2 = model->clone();
  for (const auto& [name, m] : copy2->named_modules()) {
    INFO(name);
    CHECK(m->is_training());
  }
}

TEST_CASE("clone: Sequential clones each child", "[nn]") {
  manual_seed(5);
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 4), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.25),
      std::make_shared<nn::LayerNorm>(4), std::make_shared<nn::Linear>(4, 3)});
  seq->eval();
  auto copy_base = seq->clone();
  auto copy = std::dynamic_pointer_cast<nn::Sequential>(copy_base);
  REQUIRE(copy != nullptr);
  REQUIRE(copy->size() == seq->size());
  CHECK(names_of(copy->named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias", "4.weight", "4.bias"});
  for (size_t i = 0; i < seq->size(); ++i) {
    CHECK((*copy)[i] != (*seq)[i]);
    CHECK((*copy)[i]->type_name() == (*seq)[i]->type_name());
    CHECK_FALSE((*copy)[i]->is_training());
  }
  CHECK_FALSE(copy->is_training());
  const auto po = seq->named_parameters(), pc = copy->named_parameters();
  for (size_t i = 0; i < po.size(); ++i) {
    INFO(po[i].first);
    CHECK(bitwise_equal(pc[i].second, po[i].second));
    CHECK(pc[i].second.storage() != po[i].second.storage());
  }
  // Dropout's p came along.
  auto drop = std::dynamic_pointer_cast<nn::Dropout>((*copy)[2]);
  REQUIRE(drop != nullptr);
  CHECK(drop->p == 0.25);
  Tensor x = randn({5, 6}, DType::f32, 8);
  CHECK(bitwise_equal(copy->forward(x), seq->forward(x)));
  {
    NoGradGuard no_grad;
    std::dynamic_pointer_cast<nn::Linear>((*copy)[0])->weight.copy_(zeros({4, 6}));
  }
  CHECK_FALSE(bitwise_equal(copy->forward(x), seq->forward(x)));
}

TEST_CASE("clone: a module without Cloneable throws an error that names the fix", "[nn]") {
  auto plain = std::make_shared<Plain>();
  CHECK_THROWS_WITH(plain->clone(),
                    Catch::Contains("Plain") && Catch::Contains("nn::Cloneable<Plain>") && Catch::Contains("reset()"));
  // Inside a Sequential, the same error comes out of the Sequential's clone.
  auto seq = std::make_shared<nn::Sequential>(
      std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<nn::ReLU>(), plain});
  CHECK_THROWS_WITH(seq->clone(), Catch::Contains("nn::Cloneable<Plain>"));
}

TEST_CASE("clone: a Cloneable module that registers outside reset throws naming reset", "[nn]") {
  auto m = std::make_shared<NoReset>();
  CHECK_THROWS_WITH(m->clone(), Catch::Contains("NoReset") && Catch::Contains("reset()"));
}
