// tests/nn/test_optim.cpp: SGD, Adam, AdamW, the LR schedulers and clip_grad_norm_ against PyTorch 1.13,
// their state_dict round trip (bitwise continuation) and their errors.
//
// Every optimizer test starts from p = [1, -2, 0.5] and feeds three fixed gradients, so the trajectory
// exercises the state (momentum buffers, Adam's moments and bias corrections). The expected values were
// printed once by PyTorch 1.13 (Debian's python3-torch, run with /usr/bin/python3) with this script:
//
//   import torch
//   P0 = [1.0, -2.0, 0.5]
//   G = [[0.1, -0.3, 0.7], [0.25, -0.25, 0.5], [-0.4, 0.2, 0.3]]
//   def run(make, dtype=torch.float64):
//       p = torch.tensor(P0, dtype=dtype, requires_grad=True); opt = make([p])
//       for k in range(3):
//           p.grad = torch.tensor(G[k], dtype=dtype); opt.step()
//           print([repr(float(x)) for x in p.detach()])
//   run(lambda ps: torch.optim.SGD(ps, lr=0.1))                                   # sgd_plain
//   run(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1))      # sgd_momentum_dampening
//   run(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True))      # sgd_nesterov (also float32)
//   run(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01))  # sgd_weight_decay
//   run(lambda ps: torch.optim.Adam(ps, lr=0.1))                                  # adam (also float32)
//   run(lambda ps: torch.optim.Adam(ps, lr=0.1, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1))
//   run(lambda ps: torch.optim.AdamW(ps, lr=0.1, weight_decay=0.1))               # adamw
//   run(lambda ps: torch.optim.AdamW(ps, lr=0.1))                                 # adamw_default
//   # schedulers: SGD(lr=0.1); vals = [s.get_last_lr()[0]] then n times opt.step(); s.step(); vals.append(...)
//   #   StepLR(opt, step_size=3, gamma=0.1), n = 10;  CosineAnnealingLR(opt, T_max=5, eta_min=0.001), n = 12
//   # clip: a.grad = [[3, -4], [1, 0.5]], b.grad = [-2, 6, 0] (float64)
//   #   total = torch.nn.utils.clip_grad_norm_([a, b], max_norm=2.5, norm_type=nt) for nt in 2, 1, inf, 3
//
// float64 results agree with PyTorch to a few ulps (it rounds some products through fused multiply-adds),
// so they are compared with a 1e-14 relative tolerance; float32 with 1e-6.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/device.h>
#include <ringgrad/core/base/error.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/optim/adam.h>
#include <ringgrad/nn/optim/clip_grad_norm.h>
#include <ringgrad/nn/optim/lr_scheduler.h>
#include <ringgrad/nn/optim/sgd.h>
#include "test_util.h"

using namespace ringgrad;

namespace {

using Rows = std::vector<std::vector<double>>;

const std::vector<double> kP0 = {1.0, -2.0, 0.5};
const Rows kGrads = {{0.1, -0.3, 0.7}, {0.25, -0.25, 0.5}, {-0.4, 0.2, 0.3}};

Tensor param(const std::vector<double>& values, DType dt = DType::f64) {
  return from_vector(values).to(dt).requires_grad_(true);
}

// Runs three steps from kP0 with kGrads and checks the parameter after each against `expected`.
template <typename Make>
void check_trajectory(Make make, const Rows& expected, DType dt = DType::f64) {
  const double rel = dt == DType::f64 ? 1e-14 : 1e-6;
  Tensor p = param(kP0, dt);
  auto opt = make(std::vector<Tensor>{p});
  for (size_t k = 0; k < expected.size(); ++k) {
    p.set_grad(from_vector(kGrads[k]).to(dt));
    opt.step();
    const std::vector<double> got = p.to(DType::f64).to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("step " << k + 1 << ", element " << i);
      CHECK(got[i] == Approx(expected[k][i]).epsilon(rel).margin(1e-300));
    }
  }
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  return std::memcmp(ac.data(), bc.data(), static_cast<size_t>(a.numel() * a.element_size())) == 0;
}

}  // namespace

// --- SGD ---------------------------------------------------------------------------------------------

TEST_CASE("SGD: plain steps are p -= lr g and match PyTorch", "[optim]") {
  // By hand: 1 - 0.1*0.1 = 0.99, then 0.99 - 0.1*0.25 = 0.965, then 0.965 + 0.1*0.4 = 1.005.
  check_trajectory([](std::vector<Tensor> ps) { return nn::optim::SGD(ps, nn::optim::SGDOptions(0.1)); },
                   {{0.99, -1.97, 0.43}, {0.965, -1.945, 0.38}, {1.005, -1.965, 0.35}});
}

TEST_CASE("SGD: momentum with dampening matches hand computation and PyTorch", "[optim]") {
  // By hand for element 0: buf1 = d1 = 0.1 (the first step copies d_p, undamped), p1 = 0.99;
  // buf2 = 0.9*0.1 + 0.9*0.25 = 0.315, p2 = 0.99 - 0.0315 = 0.9585;
  // buf3 = 0.9*0.315 - 0.9*0.4 = -0.0765, p3 = 0.9585 + 0.00765 = 0.96615.
  check_trajectory(
      [](std::vector<Tensor> ps) {
        return nn::optim::SGD(ps, nn::optim::SGDOptions(0.1).momentum(0.9).dampening(0.1));
      },
      {{0.99, -1.97, 0.43},
       {0.9585, -1.9204999999999999, 0.32199999999999995},
       {0.9661500000000001, -1.8939499999999998, 0.19779999999999995}});
}

TEST_CASE("SGD: Nesterov momentum matches PyTorch in float64 and float32", "[optim]") {
  auto make = [](std::vector<Tensor> ps) {
    return nn::optim::SGD(ps, nn::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  };
  // By hand for element 0: buf1 = 0.1, d = 0.1 + 0.9*0.1 = 0.19, p1 = 1 - 0.019 = 0.981.
  check_trajectory(make, {{0.981, -1.943, 0.367}, {0.9254, -1.8712, 0.2153}, {0.97386, -1.86708, 0.06676999999999998}});
  check_trajectory(make,
                   {{0.9810000061988831, -1.9429999589920044, 0.367000013589859},
                    {0.9254000186920166, -1.8711999654769897, 0.21530000865459442},
                    {0.9738600254058838, -1.8670799732208252, 0.06677000969648361}},
                   DType::f32);
}

TEST_CASE("SGD: weight decay is added to the gradient before momentum", "[optim]") {
  // By hand for element 0: d1 = 0.1 + 0.01*1 = 0.11, p1 = 1 - 0.011 = 0.989.
  check_trajectory(
      [](std::vector<Tensor> ps) {
        return nn::optim::SGD(ps, nn::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
      },
      {{0.989, -1.968, 0.4295},
       {0.9531109999999999, -1.912232, 0.31562049999999997},
       {0.959857789, -1.880128568, 0.18281332949999995}});
}

TEST_CASE("SGD: parameters without a gradient are skipped and keep no state", "[optim]") {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  nn::optim::SGD opt({a, b}, nn::optim::SGDOptions(0.5).momentum(0.9));
  a.set_grad(from_vector<double>({1.0, -1.0}));
  opt.step();
  CHECK(a.to_vector<double>() == std::vector<double>{0.5, 2.5});
  CHECK(b.to_vector<double>() == std::vector<double>{3.0});
  const nn::StateDict state = opt.state_dict();
  CHECK(state.count("state.0.momentum_buffer") == 1);
  CHECK(state.count("state.1.momentum_buffer") == 0);
  // Its first step later starts a fresh momentum buffer from its own gradient.
  a.set_grad(Tensor());
  b.set_grad(from_vector<double>({2.0}));
  opt.step();
  CHECK(b.to_vector<double>() == std::vector<double>{2.0});
  CHECK(a.to_vector<double>() == std::vector<double>{0.5, 2.5});
}

TEST_CASE("SGD: options chain and the defaults are PyTorch's", "[optim]") {
  const nn::optim::SGDOptions o = nn::optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-4);
  CHECK(o.lr() == 0.1);
  CHECK(o.momentum() == 0.9);
  CHECK(o.dampening() == 0.0);
  CHECK(o.nesterov());
  CHECK(o.weight_decay() == 1e-4);
  const nn::optim::SGDOptions d(0.2);
  CHECK(d.momentum() == 0.0);
  CHECK(d.dampening() == 0.0);
  CHECK_FALSE(d.nesterov());
  CHECK(d.weight_decay() == 0.0);
}

// --- Adam and AdamW ----------------------------------------------------------------------------------

TEST_CASE("Adam: bias-corrected steps match hand computation and PyTorch", "[optim]") {
  // By hand, first step: m = 0.1 g, v = 0.001 g^2, so m/(1-0.9) = g and sqrt(v/(1-0.999)) = |g|;
  // p1 = p0 - 0.1 g/(|g| + 1e-8) = p0 - 0.1 sign(g) (up to eps): 0.9, -1.9, 0.4.
  auto make = [](std::vector<Tensor> ps) { return nn::optim::Adam(ps, nn::optim::AdamOptions(0.1)); };
  check_trajectory(make, {{0.900000009999999, -1.9000000033333333, 0.4000000014285714},
                          {0.806029271380724, -1.8008827194642782, 0.3022179359173407},
                          {0.818484955017889, -1.7618375616130308, 0.20980286941453058}});
  check_trajectory(make,
                   {{0.8999999761581421, -1.899999976158142, 0.4000000059604645},
                    {0.806029200553894, -1.8008826971054077, 0.30221793055534363},
                    {0.818484902381897, -1.7618374824523926, 0.20980285108089447}},
                   DType::f32);
}

TEST_CASE("Adam: weight decay is an L2 term in the gradient", "[optim]") {
  // By hand, first step: g' = 0.1 + 0.1*1 = 0.2 > 0, so p1 = 1 - 0.1*0.2/(0.2 + 1e-6) = 0.9000004999975.
  check_trajectory(
      [](std::vector<Tensor> ps) {
        return nn::optim::Adam(ps, nn::optim::AdamOptions(0.1).betas(0.8, 0.99).eps(1e-6).weight_decay(0.1));
      },
      {{0.9000004999975, -1.9000001999996, 0.40000013333315554},
       {0.8005340496193789, -1.800879612040941, 0.3030075122930954},
       {0.789359178591642, -1.7312141426753684, 0.21293998141893672}});
}

TEST_CASE("AdamW: decoupled decay shrinks the parameter before the Adam step", "[optim]") {
  // By hand, first step: p = 1*(1 - 0.1*0.1) = 0.99, then the bias-corrected step of -0.1 sign(g):
  // 0.89 (Adam without decay gives 0.9; with coupled decay it would differ, see the test above).
  check_trajectory(
      [](std::vector<Tensor> ps) { return nn::optim::AdamW(ps, nn::optim::AdamOptions(0.1).weight_decay(0.1)); },
      {{0.890000009999999, -1.8800000033333333, 0.3950000014285714},
       {0.787129271280724, -1.762082719430945, 0.293267935903055},
       {0.7917136622050817, -1.705416734385388, 0.1979201900412143}});
  // The default weight_decay is 1e-2, as in PyTorch; Adam's is 0.
  check_trajectory([](std::vector<Tensor> ps) { return nn::optim::AdamW(ps, nn::optim::AdamOptions(0.1)); },
                   {{0.8990000099999991, -1.8980000033333333, 0.39950000142857145},
                    {0.8041302713707241, -1.796984719460945, 0.3013184359159122},
                    {0.8157818247365184, -1.7561425768902366, 0.20860205097718615}});
  Tensor p = param({1.0});
  CHECK(nn::optim::AdamW({p}).options().weight_decay() == 1e-2);
  CHECK(nn::optim::Adam({p}).options().weight_decay() == 0.0);
  CHECK(nn::optim::AdamW({p}, nn::optim::AdamWOptions(0.1)).options().weight_decay() == 1e-2);
  CHECK(nn::optim::AdamW({p}, nn::optim::AdamOptions().weight_decay(0.0)).options().weight_decay() == 0.0);
}

TEST_CASE("Adam: options chain and the defaults are PyTorch's", "[optim]") {
  const nn::optim::AdamOptions d;
  CHECK(d.lr() == 1e-3);
  CHECK(d.betas() == std::pair<double, double>(0.9, 0.999));
  CHECK(d.eps() == 1e-8);
  CHECK_FALSE(d.has_weight_decay());
  const nn::optim::AdamOptions o = nn::optim::AdamOptions(3e-4).betas(0.9, 0.95).eps(1e-6).weight_decay(0.1);
  CHECK(o.lr() == 3e-4);
  CHECK(o.betas().second == 0.95);
  CHECK(o.eps() == 1e-6);
  CHECK(o.weight_decay() == 0.1);
}

TEST_CASE("Adam: a one-element and an empty parameter step without trouble", "[optim]") {
  Tensor a = param({2.0}), e = param({});
  nn::optim::Adam opt({a, e}, nn::optim::AdamOptions(0.5));
  a.set_grad(from_vector<double>({-3.0}));
  e.set_grad(zeros({0}, DType::f64));
  opt.step();
  CHECK(a.item() == Approx(2.5).epsilon(1e-8));
  CHECK(e.numel() == 0);
  CHECK(opt.state_dict().at("state.1.step").item() == 1.0);
}

// --- zero_grad, lr, and the checks on construction ----------------------------------------------------

TEST_CASE("Optimizer: zero_grad leaves every gradient undefined", "[optim]") {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  a.set_grad(ones({2}, DType::f64));
  b.set_grad(ones({1}, DType::f64));
  nn::optim::SGD opt({a, b}, nn::optim::SGDOptions(0.1));
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
  opt.step();  // nothing to do
  CHECK(a.to_vector<double>() == std::vector<double>{1.0, 2.0});
}

TEST_CASE("Optimizer: set_lr changes the next step", "[optim]") {
  Tensor p = param({1.0});
  nn::optim::SGD opt({p}, nn::optim::SGDOptions(0.1));
  opt.set_lr(0.5);
  CHECK(opt.lr() == 0.5);
  CHECK(opt.options().lr() == 0.5);
  p.set_grad(ones({1}, DType::f64));
  opt.step();
  CHECK(p.item() == 0.5);
  CHECK_ERROR(opt.set_lr(-1.0), "SGD", "learning rate", "-1");
}

TEST_CASE("Optimizer: gradients flow from backward into the step", "[optim]") {
  // loss = sum(p^2) has gradient 2p, so one SGD step with lr 0.25 halves p.
  Tensor p = param({4.0, -2.0});
  nn::optim::SGD opt({p}, nn::optim::SGDOptions(0.25));
  sum(p * p).backward();
  opt.step();
  CHECK(p.to_vector<double>() == std::vector<double>{2.0, -1.0});
  CHECK(p.requires_grad());
  CHECK(p.is_leaf());
}

TEST_CASE("Optimizer: bad parameter lists are rejected naming the index", "[optim]") {
  Tensor ok = param({1.0});
  CHECK_ERROR(nn::optim::SGD({}, nn::optim::SGDOptions(0.1)), "empty parameter list");
  CHECK_ERROR(nn::optim::SGD({ok, from_vector<double>({1.0})}, nn::optim::SGDOptions(0.1)), "parameter 1",
              "require grad");
  CHECK_ERROR(nn::optim::SGD({ok, ok * 2.0}, nn::optim::SGDOptions(0.1)), "parameter 1", "leaf");
  CHECK_ERROR(nn::optim::Adam({ok, Tensor()}), "parameter 1", "undefined");
  CHECK_ERROR(nn::optim::Adam({from_vector<int64_t>({1})}), "parameter 0", "floating", "int64");
  CHECK_ERROR(nn::optim::SGD({ok, ok}, nn::optim::SGDOptions(0.1)), "parameter 1", "same tensor as parameter 0");
}

TEST_CASE("Optimizer: a gradient that does not fit its parameter is reported at step", "[optim]") {
  Tensor p = param({1.0, 2.0});
  nn::optim::SGD opt({p}, nn::optim::SGDOptions(0.1));
  p.autograd_meta().grad = ones({2}, DType::f32);  // bypasses set_grad's own check
  CHECK_ERROR(opt.step(), "SGD.step", "parameter 0", "float64", "float32");
}

TEST_CASE("Optimizer: invalid options are rejected as PyTorch rejects them", "[optim]") {
  Tensor p = param({1.0});
  CHECK_ERROR(nn::optim::SGD({p}, nn::optim::SGDOptions(-0.1)), "SGD", "learning rate", "-0.1");
  CHECK_ERROR(nn::optim::SGD({p}, nn::optim::SGDOptions(0.1).momentum(-0.5)), "SGD", "momentum", "-0.5");
  CHECK_ERROR(nn::optim::SGD({p}, nn::optim::SGDOptions(0.1).weight_decay(-1)), "SGD", "weight_decay");
  CHECK_ERROR(nn::optim::SGD({p}, nn::optim::SGDOptions(0.1).nesterov(true)), "Nesterov", "momentum > 0", "dampening");
  CHECK_ERROR(nn::optim::SGD({p}, nn::optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)), "Nesterov",
              "dampening 0.1");
  CHECK_ERROR(nn::optim::Adam({p}, nn::optim::AdamOptions(-1e-3)), "Adam", "learning rate");
  CHECK_ERROR(nn::optim::Adam({p}, nn::optim::AdamOptions().betas(1.0, 0.999)), "Adam", "beta parameter at index 0");
  CHECK_ERROR(nn::optim::AdamW({p}, nn::optim::AdamOptions().betas(0.9, -0.1)), "AdamW", "beta parameter at index 1");
  CHECK_ERROR(nn::optim::Adam({p}, nn::optim::AdamOptions().eps(-1e-8)), "Adam", "epsilon");
  CHECK_ERROR(nn::optim::AdamW({p}, nn::optim::AdamOptions().weight_decay(-0.01)), "AdamW", "weight_decay");
}

// --- state_dict --------------------------------------------------------------------------------------

namespace {

// Two parameters of odd shapes, in `dt`, from fixed seeds.
std::vector<Tensor> make_params(DType dt) {
  return {randn({3, 5}, dt, 11).requires_grad_(true), randn({7}, dt, 12).requires_grad_(true)};
}

// Fresh leaves with the same values.
std::vector<Tensor> copy_params(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

// One training step on a loss whose gradient depends on the parameters: sum(tanh(p) * p^2).
void train_step(nn::optim::Optimizer& opt) {
  opt.zero_grad();
  Tensor loss = sum(tanh(opt.params()[0]) * opt.params()[0] * opt.params()[0]);
  loss = loss + sum(tanh(opt.params()[1]) * opt.params()[1] * opt.params()[1]);
  loss.backward();
  opt.step();
}

// 2n steps straight through, against n steps, state_dict(), a fresh optimizer, load_state_dict(),
// n more steps: parameters and optimizer state must agree bit for bit.
template <typename Opt, typename Options>
void check_resume_is_bitwise(const Options& options, DType dt) {
  const int n = 4;
  const std::vector<Tensor> straight = make_params(dt);
  Opt a(straight, options);
  for (int i = 0; i < 2 * n; ++i) train_step(a);

  const std::vector<Tensor> resumed = make_params(dt);  // same seeds: the same starting point
  nn::StateDict saved;
  {
    Opt b(resumed, options);
    for (int i = 0; i < n; ++i) train_step(b);
    saved = b.state_dict();
  }                                // the "crash": only the parameters (the model's weights) and `saved` survive
  Opt c(resumed, Options(0.123));  // other hyperparameters, to show that they are restored too
  c.load_state_dict(saved);
  CHECK(c.lr() == a.lr());
  for (int i = 0; i < n; ++i) train_step(c);

  for (size_t i = 0; i < resumed.size(); ++i) {
    INFO("parameter " << i);
    CHECK(bitwise_equal(resumed[i], straight[i]));
  }
  const nn::StateDict sa = a.state_dict(), sc = c.state_dict();
  REQUIRE(sa.size() == sc.size());
  for (const auto& [key, t] : sa) {
    INFO(key);
    REQUIRE(sc.count(key) == 1);
    CHECK(bitwise_equal(t, sc.at(key)));
  }
}

}  // namespace

TEST_CASE("SGD: state_dict round trip continues bitwise identically", "[optim]") {
  check_resume_is_bitwise<nn::optim::SGD>(nn::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-3),
                                          DType::f32);
  check_resume_is_bitwise<nn::optim::SGD>(nn::optim::SGDOptions(0.05).momentum(0.8).dampening(0.2), DType::f64);
}

TEST_CASE("Adam: state_dict round trip continues bitwise identically", "[optim]") {
  check_resume_is_bitwise<nn::optim::Adam>(nn::optim::AdamOptions(0.01).betas(0.8, 0.95).weight_decay(1e-2),
                                           DType::f32);
  check_resume_is_bitwise<nn::optim::AdamW>(nn::optim::AdamOptions(0.01).weight_decay(0.05), DType::f64);
}

TEST_CASE("Optimizer: state_dict names its entries as PyTorch does", "[optim]") {
  std::vector<Tensor> ps = make_params(DType::f32);
  nn::optim::AdamW opt(ps, nn::optim::AdamOptions(0.01).betas(0.8, 0.95).eps(1e-7).weight_decay(0.1));
  const nn::StateDict before = opt.state_dict();
  CHECK(before.count("state.0.step") == 0);  // no state before the first step, as in PyTorch
  train_step(opt);
  train_step(opt);
  const nn::StateDict s = opt.state_dict();
  std::vector<std::string> keys;
  for (const auto& entry : s) keys.push_back(entry.first);
  CHECK(keys == std::vector<std::string>{"param_groups.0.beta1", "param_groups.0.beta2",
                                         "param_groups.0.decoupled_weight_decay", "param_groups.0.eps",
                                         "param_groups.0.lr", "param_groups.0.params", "param_groups.0.weight_decay",
                                         "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step", "state.1.exp_avg",
                                         "state.1.exp_avg_sq", "state.1.step"});
  CHECK(s.at("param_groups.0.lr").dtype() == DType::f64);
  CHECK(s.at("param_groups.0.lr").dim() == 0);
  CHECK(s.at("param_groups.0.beta2").item() == 0.95);
  CHECK(s.at("param_groups.0.eps").item() == 1e-7);
  CHECK(s.at("param_groups.0.params").to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(s.at("state.1.step").item() == 2.0);
  CHECK(s.at("state.1.step").dtype() == DType::f64);
  CHECK(s.at("state.0.exp_avg").shape() == Shape{3, 5});
  CHECK(s.at("state.0.exp_avg_sq").dtype() == DType::f32);
}

TEST_CASE("Optimizer: load_state_dict rejects a mismatched state and changes nothing", "[optim]") {
  std::vector<Tensor> ps = make_params(DType::f64);
  nn::optim::Adam opt(ps, nn::optim::AdamOptions(0.01));
  train_step(opt);
  const nn::StateDict good = opt.state_dict();

  auto without = [&](const std::string& key) {
    nn::StateDict s = good;
    s.erase(key);
    return s;
  };
  auto with = [&](const std::string& key, const Tensor& t) {
    nn::StateDict s = good;
    s[key] = t;
    return s;
  };
  CHECK_ERROR(opt.load_state_dict(without("state.1.exp_avg_sq")), "Adam.load_state_dict", "missing key",
              "state.1.exp_avg_sq");
  CHECK_ERROR(opt.load_state_dict(without("param_groups.0.eps")), "missing key", "param_groups.0.eps");
  CHECK_ERROR(opt.load_state_dict(with("state.0.exp_avg", zeros({5, 3}, DType::f64))), "state.0.exp_avg",
              "expected shape [3, 5]", "got [5, 3]");
  CHECK_ERROR(opt.load_state_dict(with("state.1.exp_avg", zeros({7}, DType::f32))), "state.1.exp_avg",
              "expected dtype float64", "got float32");
  CHECK_ERROR(opt.load_state_dict(with("state.0.step", scalar_tensor(0.5, DType::f64))), "state.0.step",
              "whole number");
  CHECK_ERROR(opt.load_state_dict(with("state.0.foo", zeros({1}))), "unexpected key", "state.0.foo");
  CHECK_ERROR(opt.load_state_dict(with("param_groups.0.beta1", scalar_tensor(1.5, DType::f64))),
              "beta parameter at index 0");

  // Another parameter count.
  std::vector<Tensor> three = make_params(DType::f64);
  three.push_back(param({1.0}));
  nn::optim::Adam bigger(three, nn::optim::AdamOptions(0.01));
  train_step(bigger);
  CHECK_ERROR(opt.load_state_dict(bigger.state_dict()), "param_groups.0.params", "expected 2 parameters", "3");

  // Another optimizer's state.
  nn::optim::SGD sgd(copy_params(ps), nn::optim::SGDOptions(0.1).momentum(0.9));
  train_step(sgd);
  CHECK_ERROR(opt.load_state_dict(sgd.state_dict()), "Adam.load_state_dict", "missing key");
  CHECK_ERROR(sgd.load_state_dict(good), "SGD.load_state_dict", "missing key", "param_groups.0.momentum");
  nn::optim::AdamW adamw(copy_params(ps), nn::optim::AdamOptions(0.01));
  train_step(adamw);
  CHECK_ERROR(opt.load_state_dict(adamw.state_dict()), "decoupled_weight_decay", "AdamW");

  // After all these failures the optimizer is exactly as it was.
  const nn::StateDict after = opt.state_dict();
  REQUIRE(after.size() == good.size());
  for (const auto& [key, t] : good) {
    INFO(key);
    CHECK(bitwise_equal(t, after.at(key)));
  }
}

TEST_CASE("Optimizer: state_dict and load_state_dict copy, never alias", "[optim]") {
  Tensor p = param({1.0, 2.0});
  nn::optim::SGD opt({p}, nn::optim::SGDOptions(0.1).momentum(0.9));
  p.set_grad(ones({2}, DType::f64));
  opt.step();
  const nn::StateDict s = opt.state_dict();
  const Tensor buf = s.at("state.0.momentum_buffer");
  const std::vector<double> saved = buf.to_vector<double>();
  opt.step();  // a snapshot does not follow later steps ...
  CHECK(buf.to_vector<double>() == saved);
  opt.load_state_dict(s);
  opt.step();  // ... and a loaded state does not write back into the caller's tensors
  CHECK(buf.to_vector<double>() == saved);
}

// --- schedulers ----------------------------------------------------------------------------------------

namespace {
template <typename Make>
void check_schedule(Make make, const std::vector<double>& expected, double rel) {
  Tensor p = param({0.0});
  nn::optim::SGD opt({p}, nn::optim::SGDOptions(0.1));
  auto sched = make(opt);
  CHECK(sched.last_epoch() == 0);
  CHECK(sched.get_last_lr() == Approx(expected[0]).epsilon(rel));
  for (size_t e = 1; e < expected.size(); ++e) {
    sched.step();
    INFO("epoch " << e);
    CHECK(sched.last_epoch() == static_cast<int64_t>(e));
    CHECK(sched.get_last_lr() == Approx(expected[e]).epsilon(rel));
    CHECK(opt.lr() == sched.get_last_lr());
  }
}
}  // namespace

TEST_CASE("StepLR: matches PyTorch bit for bit", "[optim]") {
  check_schedule(
      [](nn::optim::Optimizer& o) { return nn::optim::StepLR(o, 3, 0.1); },
      {0.1, 0.1, 0.1, 0.010000000000000002, 0.010000000000000002, 0.010000000000000002, 0.0010000000000000002,
       0.0010000000000000002, 0.0010000000000000002, 0.00010000000000000003, 0.00010000000000000003},
      0.0);
}

TEST_CASE("CosineAnnealingLR: matches PyTorch to rounding, past T_max too", "[optim]") {
  // PyTorch's step() uses its recursive form; ours is the closed form, equal up to rounding.
  check_schedule([](nn::optim::Optimizer& o) { return nn::optim::CosineAnnealingLR(o, 5, 0.001); },
                 {0.1, 0.0905463412215599, 0.06579634122155989, 0.035203658778440096, 0.010453658778440105, 0.001,
                  0.010453658778440102, 0.03520365877844012, 0.06579634122155993, 0.09054634122155995,
                  0.10000000000000005, 0.09054634122155998, 0.06579634122155995},
                 1e-14);
}

TEST_CASE("LRScheduler: state_dict restores the schedule", "[optim]") {
  Tensor p = param({0.0});
  nn::optim::SGD opt({p}, nn::optim::SGDOptions(0.1));
  nn::optim::CosineAnnealingLR sched(opt, 10);
  for (int i = 0; i < 4; ++i) sched.step();
  const nn::StateDict s = sched.state_dict();
  CHECK(s.at("last_epoch").item() == 4.0);
  CHECK(s.at("base_lr").item() == 0.1);

  nn::optim::SGD opt2({param({0.0})}, nn::optim::SGDOptions(0.7));
  nn::optim::CosineAnnealingLR resumed(opt2, 10);
  resumed.load_state_dict(s);
  CHECK(resumed.last_epoch() == 4);
  CHECK(resumed.get_last_lr() == sched.get_last_lr());
  sched.step();
  resumed.step();
  CHECK(opt2.lr() == opt.lr());

  CHECK_ERROR(resumed.load_state_dict({{"last_epoch", scalar_tensor(2.0, DType::f64)}}), "missing key", "base_lr");
  CHECK_ERROR(resumed.load_state_dict(
                  {{"last_epoch", scalar_tensor(-1.0, DType::f64)}, {"base_lr", scalar_tensor(0.1, DType::f64)}}),
              "last_epoch", "whole number");
  CHECK_ERROR(nn::optim::StepLR(opt, 0), "StepLR", "step_size >= 1", "got 0");
  CHECK_ERROR(nn::optim::CosineAnnealingLR(opt, 0), "CosineAnnealingLR", "T_max >= 1");
}

// --- clip_grad_norm_ -----------------------------------------------------------------------------------

TEST_CASE("clip_grad_norm_: total norm and rescaled gradients match PyTorch", "[optim]") {
  struct Case {
    double norm_type, total;
    std::vector<double> ga, gb;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {2.0,
       8.139410298049853,
       {0.9214425620433937, -1.2285900827245249, 0.3071475206811312, 0.1535737603405656},
       {-0.6142950413622624, 1.8428851240867874, 0.0}},
      {1.0,
       16.5,
       {0.45454542699724687, -0.6060605693296625, 0.15151514233241561, 0.07575757116620781},
       {-0.30303028466483123, 0.9090908539944937, 0.0}},
      {inf,
       6.0,
       {1.2499997916667014, -1.6666663888889353, 0.4166665972222338, 0.2083332986111169},
       {-0.8333331944444676, 2.4999995833334028, 0.0}},
      {3.0,
       6.812182601715,
       {1.100968564339904, -1.4679580857865386, 0.36698952144663466, 0.18349476072331733},
       {-0.7339790428932693, 2.201937128679808, 0.0}},
  };
  for (const Case& c : cases) {
    INFO("norm_type " << c.norm_type);
    Tensor a = param({3.0, -4.0, 1.0, 0.5}).detach().reshape({2, 2}).requires_grad_(true);
    Tensor b = param({-2.0, 6.0, 0.0});
    Tensor none = param({1.0});  // no gradient: skipped
    a.set_grad(from_vector<double>({3.0, -4.0, 1.0, 0.5}, {2, 2}));
    b.set_grad(from_vector<double>({-2.0, 6.0, 0.0}));
    CHECK(nn::optim::clip_grad_norm_({a, none, b}, 2.5, c.norm_type) == Approx(c.total).epsilon(1e-14));
    const std::vector<double> ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
    for (size_t i = 0; i < ga.size(); ++i) CHECK(ga[i] == Approx(c.ga[i]).epsilon(1e-14));
    for (size_t i = 0; i < gb.size(); ++i) CHECK(gb[i] == Approx(c.gb[i]).epsilon(1e-14).margin(1e-300));
    CHECK_FALSE(none.grad().defined());
  }
}

TEST_CASE("clip_grad_norm_: gradients within the limit are left bit for bit", "[optim]") {
  Tensor a = param({0.3, -0.4});
  const Tensor g = from_vector<float>({0.3f, -0.4f});
  a = a.detach().to(DType::f32).requires_grad_(true);
  a.set_grad(g);
  CHECK(nn::optim::clip_grad_norm_({a}, 1.0) == Approx(0.5).epsilon(1e-6));
  CHECK(a.grad().to_vector<float>() == std::vector<float>{0.3f, -0.4f});
  CHECK(a.grad().same(g));  // scaled in place when it is scaled at all: the handle stays
  CHECK(nn::optim::clip_grad_norm_({param({1.0})}, 1.0) == 0.0);  // no gradients at all
  CHECK_ERROR(nn::optim::clip_grad_norm_({a}, 1.0, 0.0), "clip_grad_norm_", "norm_type");
}

TEST_CASE("optimizer steps split across threads give the same bits as one thread", "[optim]") {
  // Parameters of at least 2^18 elements are updated in chunks on several threads
  // (kernels/cpu/optim.cpp). Each element's update is independent, so the split must not change a
  // single bit; 300001 elements and 3 threads give uneven chunks and a ragged tail.
  auto run = [](int threads, bool adam) {
    ringgrad::set_num_threads(threads);
    Tensor p = randn({300001}, DType::f32, 11).requires_grad_(true);
    std::unique_ptr<nn::optim::Optimizer> opt;
    if (adam)
      opt = std::make_unique<nn::optim::AdamW>(std::vector<Tensor>{p}, nn::optim::AdamOptions(1e-2));
    else
      opt = std::make_unique<nn::optim::SGD>(
          std::vector<Tensor>{p}, nn::optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-3));
    for (uint64_t step = 0; step < 3; ++step) {
      p.set_grad(randn({300001}, DType::f32, 100 + step));
      opt->step();
    }
    ringgrad::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    return p.detach().to_vector<float>();
  };
  for (bool adam : {false, true}) {
    INFO((adam ? "AdamW" : "SGD"));
    const std::vector<float> one = run(1, adam), three = run(3, adam);
    CHECK(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)) == 0);
  }
}
