// tests/nn/test_layers.cpp: the built-in layers (Linear, activations, LayerNorm, Sequential, MLP) and
// the loss modules -- their init, shapes, forward values and printing -- and gradchecks of the ops
// and layers they add (fused linear+activation, layer_norm, whole MLPs).
//
// gradcheck runs in float64 (build the layer, then model->to(DType::f64)). Inputs of a ReLU are kept
// away from its kink deliberately: each bias is set to the middle of the widest gap between the
// pre-activations of its column, so every pre-activation is at least half that gap from 0 and both
// signs occur; a REQUIRE checks the margin before gradcheck runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/generator.h>
#include <ringgrad/core/gradcheck.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/activation.h>
#include <ringgrad/nn/embedding.h>
#include <ringgrad/nn/init.h>
#include <ringgrad/nn/layernorm.h>
#include <ringgrad/nn/linear.h>
#include <ringgrad/nn/loss.h>
#include <ringgrad/nn/module.h>
#include <ringgrad/nn/sequential.h>

#include "test_util.h"

using namespace ringgrad;

namespace {

using Inputs = std::vector<Tensor>;

std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

Tensor leaf(const Shape& shape, uint64_t seed) { return randn(shape, DType::f64, seed).requires_grad_(true); }

std::string printed(const nn::Module& m) {
  std::ostringstream os;
  os << m;
  return os.str();
}

// Sets b (out) so that every element of (rows of x) W^T + b is at least half the widest gap between
// the column's values from 0, with values of both signs in each column. Returns the smallest |z|.
double place_bias_in_widest_gaps(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  NoGradGuard no_grad;
  const Tensor z = linear(x.reshape({-1, x.size(-1)}), weight, Tensor());
  const int64_t rows = z.size(0), cols = z.size(1);
  REQUIRE(rows >= 2);
  const std::vector<double> zv = values(z);
  std::vector<double> b(cols);
  for (int64_t j = 0; j < cols; ++j) {
    std::vector<double> col(rows);
    for (int64_t i = 0; i < rows; ++i) col[i] = zv[i * cols + j];
    std::sort(col.begin(), col.end());
    int64_t best = 1;
    for (int64_t k = 2; k < rows; ++k)
      if (col[k] - col[k - 1] > col[best] - col[best - 1]) best = k;
    b[j] = -(col[best] + col[best - 1]) / 2;
  }
  bias.copy_(from_vector(b, {cols}));
  double margin = 1e300;
  for (double v : values(linear(x.reshape({-1, x.size(-1)}), weight, bias))) margin = std::min(margin, std::abs(v));
  return margin;
}

double gelu_tanh_ref(double z) {
  const double k = std::sqrt(2.0 / std::acos(-1.0));
  return 0.5 * z * (1.0 + std::tanh(k * (z + 0.044715 * z * z * z)));
}

}  // namespace

// --- Linear -------------------------------------------------------------------------------------------

TEST_CASE("Linear: shapes of weight and bias, and of the output for 2-D and 3-D input", "[nn]") {
  nn::Linear lin(37, 23);
  CHECK(lin.weight.shape() == Shape{23, 37});
  CHECK(lin.bias.shape() == Shape{23});
  CHECK(lin.weight.dtype() == DType::f32);
  CHECK(lin.weight.requires_grad());
  CHECK(lin.forward(randn({5, 37}, DType::f32, 1)).shape() == Shape{5, 23});
  CHECK(lin.forward(randn({2, 3, 37}, DType::f32, 1)).shape() == Shape{2, 3, 23});
  CHECK(lin.forward(randn({0, 37}, DType::f32, 1)).shape() == Shape{0, 23});

  nn::Linear no_bias(nn::LinearOptions(4, 9).bias(false));
  CHECK_FALSE(no_bias.bias.defined());
  REQUIRE(no_bias.named_parameters().size() == 1);
  CHECK(no_bias.named_parameters()[0].first == "weight");

  nn::Linear wide(nn::LinearOptions(3, 2).dtype(DType::f64));
  CHECK(wide.weight.dtype() == DType::f64);
  CHECK(wide.bias.dtype() == DType::f64);

  CHECK_THROWS_AS(nn::Linear(0, 3), Error);
  CHECK_THROWS_AS(nn::Linear(3, -1), Error);
  CHECK_THROWS_AS(lin.forward(randn({5, 36}, DType::f32, 1)), Error);
}

TEST_CASE("Linear: default init keeps weight and bias within 1 over sqrt of in_features", "[nn]") {
  for (auto [in, out] : std::vector<std::pair<int64_t, int64_t>>{{37, 23}, {784, 10}, {1, 5}}) {
    manual_seed(in);
    nn::Linear lin(in, out);
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    INFO("in=" << in << " out=" << out << " bound=" << bound);
    double wmax = 0, wsum = 0;
    for (double w : values(lin.weight)) {
      CHECK(std::abs(w) <= bound);
      wmax = std::max(wmax, std::abs(w));
      wsum += w;
    }
    for (double b : values(lin.bias)) CHECK(std::abs(b) <= bound);
    // The values fill the interval (not a narrower init), centred on 0.
    const double n = static_cast<double>(in * out);
    if (n >= 100) {
      CHECK(wmax > 0.9 * bound);
      CHECK(std::abs(wsum / n) < 0.1 * bound);
    }
  }
}

TEST_CASE("Linear: init is reproducible from the default generator's seed", "[nn]") {
  manual_seed(123);
  nn::Linear a(11, 6);
  manual_seed(123);
  nn::Linear b(11, 6);
  nn::Linear c(11, 6);
  CHECK(values(a.weight) == values(b.weight));
  CHECK(values(a.bias) == values(b.bias));
  CHECK(values(a.weight) != values(c.weight));
}

TEST_CASE("Linear: forward equals x W^T plus b", "[nn]") {
  manual_seed(2);
  nn::Linear lin(nn::LinearOptions(7, 5).dtype(DType::f64));
  const Tensor x = randn({2, 3, 7}, DType::f64, 4);
  const std::vector<double> xv = values(x), wv = values(lin.weight), bv = values(lin.bias);
  const std::vector<double> yv = values(lin.forward(x));
  REQUIRE(yv.size() == 6u * 5u);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t o = 0; o < 5; ++o) {
      double acc = bv[o];
      for (int64_t k = 0; k < 7; ++k) acc += xv[r * 7 + k] * wv[o * 7 + k];
      CHECK(yv[r * 5 + o] == Approx(acc).epsilon(1e-12).margin(1e-12));
    }

  nn::Linear no_bias(nn::LinearOptions(7, 5).bias(false));
  const Tensor xf = randn({4, 7}, DType::f32, 5);
  const std::vector<double> x2 = values(xf), w2 = values(no_bias.weight), y2 = values(no_bias.forward(xf));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t o = 0; o < 5; ++o) {
      double acc = 0;
      for (int64_t k = 0; k < 7; ++k) acc += x2[r * 7 + k] * w2[o * 7 + k];
      CHECK(y2[r * 5 + o] == Approx(acc).epsilon(1e-5).margin(1e-6));
    }
}

TEST_CASE("Linear: the fused activations equal linear followed by the activation", "[nn]") {
  manual_seed(3);
  const Tensor x = randn({9, 13}, DType::f64, 6);
  nn::Linear relu_lin(nn::LinearOptions(13, 11).activation(Activation::Relu).dtype(DType::f64));
  const std::vector<double> fused = values(relu_lin.forward(x));
  const std::vector<double> plain = values(relu(linear(x, relu_lin.weight, relu_lin.bias)));
  REQUIRE(fused.size() == plain.size());
  for (size_t i = 0; i < fused.size(); ++i) CHECK(fused[i] == Approx(plain[i]).margin(1e-12));

  nn::Linear gelu_lin(nn::LinearOptions(13, 11).activation(Activation::GeluTanh).dtype(DType::f64));
  const std::vector<double> g = values(gelu_lin.forward(x));
  const std::vector<double> z = values(linear(x, gelu_lin.weight, gelu_lin.bias));
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(gelu_tanh_ref(z[i])).epsilon(1e-12).margin(1e-12));
}

TEST_CASE("Linear: pretty_print names sizes, bias and activation", "[nn]") {
  CHECK(printed(nn::Linear(784, 256)) == "Linear(in_features=784, out_features=256, bias=true)");
  CHECK(printed(nn::Linear(nn::LinearOptions(3, 2).bias(false))) ==
        "Linear(in_features=3, out_features=2, bias=false)");
  CHECK(printed(nn::Linear(nn::LinearOptions(3, 2).activation(Activation::Relu))) ==
        "Linear(in_features=3, out_features=2, bias=true, activation=relu)");
  CHECK(printed(nn::Linear(nn::LinearOptions(3, 2).activation(Activation::GeluTanh))) ==
        "Linear(in_features=3, out_features=2, bias=true, activation=gelu_tanh)");
  CHECK(nn::Linear(3, 2).type_name() == "Linear");
}

// --- activations, Flatten, Sequential ---------------------------------------------------------------------

TEST_CASE("activation modules: forward equals the core op", "[nn]") {
  const Tensor x = randn({3, 5}, DType::f64, 7);
  CHECK(values(nn::ReLU().forward(x)) == values(relu(x)));
  CHECK(values(nn::GELU().forward(x)) == values(gelu(x)));
  CHECK(values(nn::GELU(GeluApproximate::Tanh).forward(x)) == values(gelu(x, GeluApproximate::Tanh)));
  CHECK(values(nn::Tanh().forward(x)) == values(tanh(x)));
  CHECK(values(nn::Sigmoid().forward(x)) == values(sigmoid(x)));
  CHECK(values(nn::SiLU().forward(x)) == values(silu(x)));
  CHECK(printed(nn::SiLU()) == "SiLU()");
  CHECK(printed(nn::ReLU()) == "ReLU()");
  CHECK(printed(nn::Dropout(0.25)) == "Dropout(p=0.25)");
  CHECK(nn::ReLU().named_parameters().empty());
}

TEST_CASE("Flatten: flattens all but the batch dim by default, or a chosen range", "[nn]") {
  const Tensor x = randn({2, 3, 4, 5}, DType::f32, 1);
  CHECK(nn::Flatten().forward(x).shape() == Shape{2, 60});
  CHECK(nn::Flatten(1, 2).forward(x).shape() == Shape{2, 12, 5});
  CHECK(nn::Flatten(0).forward(x).shape() == Shape{120});
  CHECK(values(nn::Flatten().forward(x)) == values(x));
}

TEST_CASE("Sequential: chains its modules, names children 0, 1, ... and prints them", "[nn]") {
  manual_seed(4);
  auto l0 = std::make_shared<nn::Linear>(6, 4);
  auto l2 = std::make_shared<nn::Linear>(4, 3);
  nn::Sequential seq{l0, std::make_shared<nn::Tanh>(), l2};
  seq.push_back(std::make_shared<nn::Sigmoid>());
  CHECK(seq.size() == 4);
  std::vector<std::string> names;
  for (const auto& entry : seq.named_parameters()) names.push_back(entry.first);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK(seq[0] == l0);
  const Tensor x = randn({5, 6}, DType::f32, 2);
  CHECK(values(seq.forward(x)) == values(sigmoid(l2->forward(tanh(l0->forward(x))))));
  CHECK(printed(seq) ==
        "Sequential(\n  (0): Linear(in_features=6, out_features=4, bias=true)\n  (1): Tanh()\n"
        "  (2): Linear(in_features=4, out_features=3, bias=true)\n  (3): Sigmoid()\n)");
  CHECK(printed(nn::Sequential()) == "Sequential()");
  CHECK(values(nn::Sequential().forward(x)) == values(x));
}

// --- MLP ----------------------------------------------------------------------------------------------

TEST_CASE("MLP: layers fc1, fc2, ... with the given sizes", "[nn]") {
  nn::MLP mlp({13, 17, 11, 5});
  REQUIRE(mlp.layers.size() == 3);
  std::vector<std::string> names;
  for (const auto& entry : mlp.named_parameters()) names.push_back(entry.first);
  CHECK(names ==
        std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"});
  CHECK(mlp.layers[0]->weight.shape() == Shape{17, 13});
  CHECK(mlp.layers[1]->weight.shape() == Shape{11, 17});
  CHECK(mlp.layers[2]->weight.shape() == Shape{5, 11});
  CHECK(mlp.layers[2]->bias.shape() == Shape{5});
  // Only hidden layers carry the fused ReLU.
  CHECK(mlp.layers[0]->options.activation() == Activation::Relu);
  CHECK(mlp.layers[2]->options.activation() == Activation::None);
  CHECK(mlp.forward(randn({4, 13}, DType::f32, 1)).shape() == Shape{4, 5});
  CHECK(printed(mlp) == "MLP(13-17-11-5, activation=relu)");
  CHECK(printed(nn::MLP({3, 2}, nn::MLP::Act::GeluTanh)) == "MLP(3-2, activation=gelu_tanh)");
  CHECK(printed(nn::MLP({3, 4, 2}, nn::MLP::Act::Tanh)) == "MLP(3-4-2, activation=tanh)");
  CHECK(nn::MLP({3, 2}).layers.size() == 1);
  CHECK_THROWS_AS(nn::MLP({3}), Error);
  CHECK_THROWS_AS(nn::MLP(std::vector<int64_t>{}), Error);
}

TEST_CASE("MLP: forward matches the manual composition for every activation", "[nn]") {
  using Act = nn::MLP::Act;
  const Act act = GENERATE(Act::Relu, Act::GeluTanh, Act::Tanh);
  INFO("activation " << static_cast<int>(act));
  manual_seed(8);
  nn::MLP mlp({13, 17, 11, 5}, act);
  mlp.to(DType::f64);
  const Tensor x = randn({6, 13}, DType::f64, 3);
  auto activate = [&](const Tensor& z) {
    switch (act) {
      case Act::Relu: return relu(z);
      case Act::GeluTanh: return gelu(z, GeluApproximate::Tanh);
      case Act::Tanh: return tanh(z);
    }
    return z;
  };
  Tensor y = x;
  for (size_t i = 0; i < mlp.layers.size(); ++i) {
    y = linear(y, mlp.layers[i]->weight, mlp.layers[i]->bias);
    if (i + 1 < mlp.layers.size()) y = activate(y);
  }
  const std::vector<double> expected = values(y), got = values(mlp.forward(x));
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(expected[i]).epsilon(1e-12).margin(1e-12));
}

// --- gradchecks: fused linear + activation ----------------------------------------------------------------

TEST_CASE("linear with fused Relu: gradient matches finite differences", "[nn][grad]") {
  const Shape x_shape = GENERATE(Shape{5, 7}, Shape{2, 3, 7}, Shape{1, 7});
  INFO("x " << x_shape);
  const bool with_bias = GENERATE(true, false);
  INFO("bias " << with_bias);
  Tensor x = leaf(x_shape, 1);
  Tensor w = leaf({4, 7}, 2);
  Tensor b = zeros({4}, DType::f64);
  const int64_t rows = x.numel() / 7;
  // With a bias and two rows or more, place the bias; otherwise the seeded values must be clear of 0.
  if (with_bias && rows >= 2) place_bias_in_widest_gaps(x, w, b);
  b.requires_grad_(true);
  double margin = 1e300;
  for (double v : values(linear(x.detach(), w.detach(), with_bias ? b.detach() : Tensor())))
    margin = std::min(margin, std::abs(v));
  INFO("smallest |pre-activation| " << margin);
  REQUIRE(margin >= 1e-3);
  if (with_bias && rows >= 2) {
    // Both signs occur in every column, so the mask is exercised.
    const std::vector<double> y = values(linear(x.detach(), w.detach(), b.detach(), Activation::Relu));
    CHECK(std::count(y.begin(), y.end(), 0.0) > 0);
    CHECK(std::count_if(y.begin(), y.end(), [](double v) { return v > 0; }) > 0);
  }
  if (with_bias) {
    CHECK_GRADCHECK([](const Inputs& in) { return linear(in[0], in[1], in[2], Activation::Relu); }, Inputs{x, w, b});
  } else {
    CHECK_GRADCHECK([](const Inputs& in) { return linear(in[0], in[1], Tensor(), Activation::Relu); }, Inputs{x, w});
  }
}

TEST_CASE("linear with fused GeluTanh: gradient matches finite differences", "[nn][grad]") {
  const Shape x_shape = GENERATE(Shape{5, 7}, Shape{2, 3, 7});
  INFO("x " << x_shape);
  Tensor x = leaf(x_shape, 3), w = leaf({4, 7}, 4), b = leaf({4}, 5);
  CHECK_GRADCHECK([](const Inputs& in) { return linear(in[0], in[1], in[2], Activation::GeluTanh); }, Inputs{x, w, b});
  CHECK_GRADCHECK([](const Inputs& in) { return linear(in[0], in[1], Tensor(), Activation::GeluTanh); }, Inputs{x, w});
}

TEST_CASE("Linear module in float64: gradient matches finite differences for input, weight and bias", "[nn][grad]") {
  manual_seed(6);
  auto lin = std::make_shared<nn::Linear>(7, 4);
  lin->to(DType::f64);
  Tensor x = leaf({3, 7}, 6);
  const std::vector<Tensor> params = lin->parameters();
  CHECK_GRADCHECK([&](const Inputs& in) { return lin->forward(in[0]); }, Inputs{x, params[0], params[1]});
}

// --- gradchecks: layer_norm -------------------------------------------------------------------------------

TEST_CASE("layer_norm: gradient matches finite differences with and without weight and bias", "[nn][grad]") {
  const Shape x_shape = GENERATE(Shape{7}, Shape{5, 7}, Shape{2, 3, 7}, Shape{1, 7}, Shape{3, 1, 7});
  INFO("x " << x_shape);
  Tensor x = leaf(x_shape, 11);
  Tensor w = leaf({7}, 12), b = leaf({7}, 13);
  CHECK_GRADCHECK([](const Inputs& in) { return layer_norm(in[0], in[1], in[2]); }, Inputs{x, w, b});
  CHECK_GRADCHECK([](const Inputs& in) { return layer_norm(in[0], Tensor(), Tensor()); }, Inputs{x});
  CHECK_GRADCHECK([](const Inputs& in) { return layer_norm(in[0], in[1], Tensor()); }, Inputs{x, w});
  CHECK_GRADCHECK([](const Inputs& in) { return layer_norm(in[0], Tensor(), in[1]); }, Inputs{x, b});
  // A larger eps changes the function; the gradient still matches.
  CHECK_GRADCHECK([](const Inputs& in) { return layer_norm(in[0], in[1], in[2], 0.1); }, Inputs{x, w, b});
}

TEST_CASE("layer_norm: a 3-D input with odd sizes, through a weighted sum", "[nn][grad]") {
  Tensor x = leaf({3, 5, 9}, 21), w = leaf({9}, 22), b = leaf({9}, 23);
  const Tensor mix = randn({3, 5, 9}, DType::f64, 24);
  CHECK_GRADCHECK([&](const Inputs& in) { return sum(layer_norm(in[0], in[1], in[2]) * mix); }, Inputs{x, w, b});
}

TEST_CASE("layer_norm: bad weight or bias shapes throw", "[nn]") {
  const Tensor x = randn({3, 5}, DType::f64, 1);
  CHECK_THROWS_AS(layer_norm(x, ones({4}, DType::f64), Tensor()), Error);
  CHECK_THROWS_AS(layer_norm(x, Tensor(), ones({5, 1}, DType::f64)), Error);
  CHECK_THROWS_AS(layer_norm(x, ones({5}), Tensor()), Error);  // dtype mismatch
}

TEST_CASE("LayerNorm module: each row has mean 0 and variance 1", "[nn]") {
  nn::LayerNorm norm(37);
  CHECK(values(norm.weight) == std::vector<double>(37, 1.0));
  CHECK(values(norm.bias) == std::vector<double>(37, 0.0));
  const Tensor x = randn({2, 3, 37}, DType::f32, 31) * 3.0 + 5.0;
  const Tensor y = norm.forward(x);
  CHECK(y.shape() == x.shape());
  const std::vector<double> yv = values(y);
  for (int64_t r = 0; r < 6; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < 37; ++c) m += yv[r * 37 + c];
    m /= 37;
    for (int64_t c = 0; c < 37; ++c) v += (yv[r * 37 + c] - m) * (yv[r * 37 + c] - m);
    v /= 37;  // biased, as layer_norm uses
    INFO("row " << r);
    CHECK(m == Approx(0.0).margin(1e-5));
    CHECK(v == Approx(1.0).margin(1e-4));
  }
  // weight and bias scale and shift each normalised row.
  {
    NoGradGuard no_grad;
    norm.weight.copy_(full({37}, 2.0));
    norm.bias.copy_(full({37}, 0.5));
  }
  const std::vector<double> scaled = values(norm.forward(x));
  for (size_t i = 0; i < scaled.size(); ++i) CHECK(scaled[i] == Approx(2.0 * yv[i] + 0.5).margin(1e-5));
}

TEST_CASE("LayerNorm module: parameters, printing and shape checks", "[nn]") {
  nn::LayerNorm norm(7);
  std::vector<std::string> names;
  for (const auto& entry : norm.named_parameters()) names.push_back(entry.first);
  CHECK(names == std::vector<std::string>{"weight", "bias"});
  CHECK(printed(norm) == "LayerNorm(7, eps=1e-05, elementwise_affine=true)");
  nn::LayerNorm plain(7, 1e-3, /*elementwise_affine=*/false);
  CHECK(plain.named_parameters().empty());
  CHECK_FALSE(plain.weight.defined());
  CHECK(values(plain.forward(randn({2, 7}, DType::f32, 1))).size() == 14u);
  CHECK_THROWS_WITH(norm.forward(randn({2, 6}, DType::f32, 1)), Catch::Contains("LayerNorm"));
  CHECK_THROWS_AS(nn::LayerNorm(0), Error);
}

TEST_CASE("LayerNorm module in float64: gradient matches finite differences", "[nn][grad]") {
  auto norm = std::make_shared<nn::LayerNorm>(5);
  norm->to(DType::f64);
  {
    NoGradGuard no_grad;  // non-trivial weight and bias, so their gradients are exercised
    norm->weight.copy_(randn({5}, DType::f64, 41));
    norm->bias.copy_(randn({5}, DType::f64, 42));
  }
  Tensor x = leaf({2, 3, 5}, 43);
  CHECK_GRADCHECK([&](const Inputs& in) { return norm->forward(in[0]); }, Inputs{x, norm->weight, norm->bias});
}

// --- gradchecks: MLP end to end ------------------------------------------------------------------------

TEST_CASE("MLP end to end: gradient matches finite differences for the input and all weights", "[nn][grad]") {
  using Act = nn::MLP::Act;
  const Act act = GENERATE(Act::Relu, Act::GeluTanh, Act::Tanh);
  INFO("activation " << static_cast<int>(act));
  manual_seed(17);
  auto mlp = std::make_shared<nn::MLP>(std::vector<int64_t>{5, 7, 6, 3}, act);
  mlp->to(DType::f64);
  const Tensor x = randn({6, 5}, DType::f64, 18);

  if (act == Act::Relu) {
    // Keep every hidden pre-activation away from the ReLU's kink: place each hidden layer's bias,
    // layer by layer, in the widest gaps of its pre-activations.
    Tensor h = x;
    for (size_t i = 0; i + 1 < mlp->layers.size(); ++i) {
      const double margin = place_bias_in_widest_gaps(h, mlp->layers[i]->weight, mlp->layers[i]->bias);
      INFO("layer fc" << i + 1 << " smallest |pre-activation| " << margin);
      REQUIRE(margin >= 1e-3);
      NoGradGuard no_grad;
      h = mlp->layers[i]->forward(h);
    }
  }

  // With respect to the input.
  Tensor xin = x.detach().clone().requires_grad_(true);
  CHECK_GRADCHECK([&](const Tensor& in) { return mlp->forward(in); }, xin);

  // With respect to the weights: the model's own parameters are gradcheck's inputs, perturbed in place.
  const std::vector<Tensor> params = mlp->parameters();
  REQUIRE(params.size() == 6);
  for (const Tensor& p : params) REQUIRE(p.dtype() == DType::f64);
  Inputs inputs{xin};
  inputs.insert(inputs.end(), params.begin(), params.end());
  for (size_t i = 0; i < params.size(); ++i) CHECK(inputs[i + 1].same(mlp->named_parameters()[i].second));
  CHECK_GRADCHECK([&](const Inputs& in) { return mlp->forward(in[0]); }, inputs);

  // And through a loss, as training uses it.
  const Tensor labels = from_vector<int64_t>({0, 2, 1, 1, 0, 2});
  nn::CrossEntropyLoss loss_fn;
  CHECK_GRADCHECK([&](const Inputs& in) { return loss_fn(mlp->forward(in[0]), labels); }, inputs);
}

// --- losses -------------------------------------------------------------------------------------------

TEST_CASE("CrossEntropyLoss module: matches the functional cross_entropy", "[nn]") {
  const Tensor logits = randn({7, 5}, DType::f64, 51);
  const Tensor labels = from_vector<int64_t>({0, 4, 2, 2, 1, 3, 0});
  CHECK(values(nn::CrossEntropyLoss()(logits, labels)) == values(cross_entropy(logits, labels)));
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum})
    for (double smoothing : {0.0, 0.1}) {
      INFO("reduction " << static_cast<int>(r) << " smoothing " << smoothing);
      nn::CrossEntropyLoss loss(nn::CrossEntropyLossOptions().reduction(r).label_smoothing(smoothing));
      CHECK(values(loss(logits, labels)) == values(cross_entropy(logits, labels, r, smoothing)));
    }
  // Mean with smoothing 0 is the average of -log softmax at the label.
  const std::vector<double> ls = values(log_softmax(logits, 1));
  const std::vector<int64_t> lv = labels.to_vector<int64_t>();
  double expected = 0;
  for (int64_t i = 0; i < 7; ++i) expected -= ls[i * 5 + lv[i]];
  CHECK(nn::CrossEntropyLoss()(logits, labels).item() == Approx(expected / 7).epsilon(1e-12));
}

TEST_CASE("CrossEntropyLoss module: gradient matches finite differences", "[nn][grad]") {
  const double smoothing = GENERATE(0.0, 0.2);
  INFO("smoothing " << smoothing);
  const Tensor labels = from_vector<int64_t>({0, 4, 2, 2, 1, 3, 0});
  nn::CrossEntropyLoss loss(nn::CrossEntropyLossOptions().label_smoothing(smoothing));
  CHECK_GRADCHECK([&](const Tensor& z) { return loss(z, labels); }, leaf({7, 5}, 52));
}

TEST_CASE("MSELoss module: matches the functional mse_loss", "[nn]") {
  const Tensor a = randn({4, 3}, DType::f64, 61), b = randn({4, 3}, DType::f64, 62);
  CHECK(values(nn::MSELoss()(a, b)) == values(mse_loss(a, b)));
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    INFO("reduction " << static_cast<int>(r));
    CHECK(values(nn::MSELoss(r)(a, b)) == values(mse_loss(a, b, r)));
  }
  const std::vector<double> av = values(a), bv = values(b);
  double expected = 0;
  for (size_t i = 0; i < av.size(); ++i) expected += (av[i] - bv[i]) * (av[i] - bv[i]);
  CHECK(nn::MSELoss()(a, b).item() == Approx(expected / 12).epsilon(1e-12));
}

TEST_CASE("MSELoss module: gradient matches finite differences for input and target", "[nn][grad]") {
  nn::MSELoss loss;
  CHECK_GRADCHECK([&](const Inputs& in) { return loss(in[0], in[1]); }, Inputs{leaf({4, 3}, 63), leaf({4, 3}, 64)});
  nn::MSELoss loss_sum(Reduction::Sum);
  CHECK_GRADCHECK([&](const Inputs& in) { return loss_sum(in[0], in[1]); }, Inputs{leaf({5}, 65), leaf({5}, 66)});
}

TEST_CASE("Embedding: looks rows up in indices' shape, and the padding row starts at zero and learns nothing", "[nn]") {
  manual_seed(3);
  nn::Embedding emb(nn::EmbeddingOptions(10, 4).padding_idx(-1));  // row 9
  CHECK(emb.options.padding_idx() == 9);
  REQUIRE(emb.named_parameters().size() == 1);
  CHECK(emb.named_parameters()[0].first == "weight");
  CHECK(emb.weight.shape() == Shape{10, 4});
  CHECK(emb.weight.narrow(0, 9, 1).to_vector<float>() == std::vector<float>(4, 0.0f));
  const Tensor ids = from_vector(std::vector<int64_t>{9, 2, 2, 0, 9, 5}, Shape{3, 2});
  const Tensor y = emb.forward(ids);
  REQUIRE(y.shape() == Shape{3, 2, 4});
  CHECK(y.narrow(0, 1, 1).narrow(1, 1, 1).reshape({4}).to_vector<float>() ==  // ids[1][1] = 0
        emb.weight.narrow(0, 0, 1).reshape({4}).to_vector<float>());
  sum(y).backward();
  const std::vector<float> g = emb.weight.grad().to_vector<float>();
  CHECK(g[2 * 4] == 2.0f);  // row 2 looked up twice
  CHECK(g[9 * 4] == 0.0f);  // the padding row
  CHECK(g[1 * 4] == 0.0f);  // never looked up
  std::ostringstream printed;
  emb.pretty_print(printed);
  CHECK(printed.str() == "Embedding(10, 4, padding_idx=9)");
  CHECK_THROWS_WITH(nn::Embedding(0, 4), Catch::Contains("Embedding: expected positive sizes"));
  CHECK_THROWS_WITH(nn::Embedding(nn::EmbeddingOptions(3, 4).padding_idx(3)),
                    Catch::Contains("padding_idx in [-3, 2]"));
}
