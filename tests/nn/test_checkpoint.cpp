// tests/nn/test_checkpoint.cpp: weights files and training checkpoints.
//
// The property that matters most: training 2N steps in one go and training N steps, saving,
// loading into a freshly built model and optimizer, and training N more give bitwise the same
// parameters -- with dropout drawing from the default generator, so the RNG state must come back
// too.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <ringgrad/core/base/error.h>
#include <ringgrad/core/generator.h>
#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/nn/activation.h>
#include <ringgrad/nn/checkpoint.h>
#include <ringgrad/nn/linear.h>
#include <ringgrad/nn/optim/adam.h>
#include <ringgrad/nn/optim/sgd.h>
#include <ringgrad/nn/safetensors.h>
#include <ringgrad/nn/sequential.h>
#include "test_util.h"

using namespace ringgrad;
using Catch::Matchers::Contains;
using ringgrad::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor dense = t.detach().to(Device::cpu()).contiguous();
  const auto* p = static_cast<const uint8_t*>(dense.data());
  return std::vector<uint8_t>(p, p + dense.numel() * dense.element_size());
}

// Name -> raw bytes: equal maps mean bitwise-equal states.
std::map<std::string, std::vector<uint8_t>> snapshot(const nn::StateDict& state) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& [name, t] : state) out[name] = bytes_of(t);
  return out;
}

// Linear -> ReLU -> Dropout -> Linear -> Tanh -> Dropout -> Linear: dropout makes every step draw
// from the default generator.
std::shared_ptr<nn::Sequential> make_model() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.3),
      std::make_shared<nn::Linear>(16, 12), std::make_shared<nn::Tanh>(), std::make_shared<nn::Dropout>(0.2),
      std::make_shared<nn::Linear>(12, 4)});
}

std::unique_ptr<nn::optim::Optimizer> make_optimizer(const std::string& kind, const nn::Module& model) {
  if (kind == "sgd")
    return std::make_unique<nn::optim::SGD>(
        model.parameters(), nn::optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-3));
  return std::make_unique<nn::optim::AdamW>(model.parameters(), nn::optim::AdamOptions(1e-2).weight_decay(0.05));
}

// Three fixed batches of 8 samples, 6 features, 4 classes; step s trains on batch s % 3.
struct Batches {
  std::vector<Tensor> x, y;
};
Batches make_batches() {
  Batches b;
  Generator g(77);
  for (int64_t i = 0; i < 3; ++i) {
    b.x.push_back(randn({8, 6}, DType::f32, g));
    std::vector<int64_t> labels;
    for (int64_t n = 0; n < 8; ++n) labels.push_back((n * 7 + i) % 4);
    b.y.push_back(from_vector<int64_t>(labels));
  }
  return b;
}

void train(nn::Module& model, nn::optim::Optimizer& opt, const Batches& data, int64_t from_step, int64_t to_step) {
  model.train();
  for (int64_t step = from_step; step < to_step; ++step) {
    opt.zero_grad();
    const size_t b = static_cast<size_t>(step % 3);
    cross_entropy(model.forward(data.x[b]), data.y[b]).backward();
    opt.step();
  }
}

}  // namespace

TEST_CASE("checkpoint: training resumes bitwise from a checkpoint", "[checkpoint]") {
  const std::string kind = GENERATE(std::string("sgd"), std::string("adamw"));
  INFO("optimizer " << kind);
  constexpr int64_t N = 5;
  const Batches data = make_batches();
  TempDir dir;
  const std::string path = dir.file("run.ckpt");

  // One run of 2N steps.
  manual_seed(1234);
  auto model = make_model();
  auto opt = make_optimizer(kind, *model);
  train(*model, *opt, data, 0, 2 * N);
  const auto p1 = snapshot(model->state_dict());
  const auto o1 = snapshot(opt->state_dict());

  // N steps, save.
  manual_seed(1234);
  model = make_model();
  opt = make_optimizer(kind, *model);
  train(*model, *opt, data, 0, N);
  nn::TrainingState saved;
  saved.step = N;
  saved.epoch = 1;
  saved.extra["note"] = "halfway";
  nn::capture_rng_state(saved);
  nn::save_checkpoint(path, *model, *opt, saved);
  const auto at_save = snapshot(model->state_dict());
  model.reset();
  opt.reset();

  // A fresh process, as far as the model, optimizer and RNG can tell: other seed, other init.
  auto resume = [&](bool restore_rng) {
    manual_seed(99);
    auto fresh = make_model();
    auto fresh_opt = make_optimizer(kind, *fresh);
    CHECK(snapshot(fresh->state_dict()) != at_save);
    const nn::TrainingState state = nn::load_checkpoint(path, *fresh, *fresh_opt);
    CHECK(snapshot(fresh->state_dict()) == at_save);
    CHECK(state.step == N);
    CHECK(state.epoch == 1);
    CHECK(state.extra == std::map<std::string, std::string>{{"note", "halfway"}});
    if (restore_rng) nn::restore_rng_state(state);
    train(*fresh, *fresh_opt, data, state.step, 2 * N);
    return std::make_pair(snapshot(fresh->state_dict()), snapshot(fresh_opt->state_dict()));
  };
  const auto [p2, o2] = resume(/*restore_rng=*/true);
  CHECK(p2 == p1);
  CHECK(o2 == o1);

  // The test can tell: without the RNG state the dropout masks differ, and so do the weights.
  const auto [p3, o3] = resume(/*restore_rng=*/false);
  CHECK(p3 != p1);
}

TEST_CASE("checkpoint: capture_rng_state and restore_rng_state replay the default generator", "[checkpoint]") {
  manual_seed(5);
  (void)rand({3});
  nn::TrainingState state;
  nn::capture_rng_state(state);
  CHECK(state.rng_seed == 5);
  CHECK(state.rng_offset == default_generator().offset());
  const std::vector<float> first = rand({4}).to_vector<float>();
  manual_seed(6);
  nn::restore_rng_state(state);
  CHECK(rand({4}).to_vector<float>() == first);

  Generator mine(8);
  (void)rand({2}, DType::f32, mine);
  nn::capture_rng_state(state, mine);
  CHECK(state.rng_seed == 8);
  CHECK(state.rng_offset == mine.offset());
}

TEST_CASE("checkpoint: the TrainingState round-trips through the metadata", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("state.ckpt");
  auto model = make_model();
  nn::optim::SGD opt(model->parameters(), nn::optim::SGDOptions(0.1));
  nn::TrainingState state;
  state.step = -3;  // whatever the script stores comes back
  state.epoch = INT64_MAX;
  state.rng_seed = UINT64_MAX;
  state.rng_offset = (uint64_t{1} << 63) + 17;
  state.extra = {{"best_accuracy", "0.8931"}, {"with.dots", "a=b"}, {"", "empty key"}};
  nn::save_checkpoint(path, *model, opt, state);

  std::map<std::string, std::string> metadata;
  const nn::StateDict tensors = nn::load_safetensors(path, &metadata);
  CHECK(metadata.at("format") == "ringgrad.checkpoint.v1");
  CHECK(metadata.at("optimizer") == "SGD");
  for (const auto& [name, t] : model->state_dict()) CHECK(tensors.count("model." + name));
  CHECK(tensors.count("optimizer.param_groups.0.lr"));

  const nn::TrainingState got = nn::load_checkpoint(path, *model, opt);
  CHECK(got.step == state.step);
  CHECK(got.epoch == state.epoch);
  CHECK(got.rng_seed == state.rng_seed);
  CHECK(got.rng_offset == state.rng_offset);
  CHECK(got.extra == state.extra);
}

TEST_CASE("checkpoint: save_model writes exactly the state_dict names and load_model restores them", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("weights.safetensors");
  manual_seed(1);
  auto model = make_model();
  nn::save_model(path, *model);
  const nn::StateDict file = nn::load_safetensors(path);
  const nn::StateDict own = model->state_dict();
  REQUIRE(file.size() == own.size());
  for (const auto& [name, t] : own) {
    INFO(name);
    REQUIRE(file.count(name));
    CHECK(bytes_of(file.at(name)) == bytes_of(t));
  }
  CHECK(file.count("0.weight"));
  CHECK(file.count("6.bias"));

  manual_seed(2);
  auto other = make_model();
  CHECK(snapshot(other->state_dict()) != snapshot(own));
  const Tensor weight_handle = other->named_parameters().front().second;
  nn::load_model(path, *other);
  CHECK(snapshot(other->state_dict()) == snapshot(own));
  CHECK(other->named_parameters().front().second.same(weight_handle));  // loaded in place
}

TEST_CASE("checkpoint: load_model accepts keys with a leading module. prefix", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ddp.safetensors");
  manual_seed(3);
  auto model = make_model();
  nn::StateDict prefixed;
  for (const auto& [name, t] : model->state_dict()) prefixed["module." + name] = t;
  nn::save_safetensors(path, prefixed);
  manual_seed(4);
  auto other = make_model();
  nn::load_model(path, *other);
  CHECK(snapshot(other->state_dict()) == snapshot(model->state_dict()));
}

TEST_CASE("checkpoint: load_model reads the weights of a training checkpoint", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("run.ckpt");
  manual_seed(3);
  auto model = make_model();
  nn::optim::SGD opt(model->parameters(), nn::optim::SGDOptions(0.1));
  nn::save_checkpoint(path, *model, opt, {});
  manual_seed(4);
  auto other = make_model();
  nn::load_model(path, *other);
  CHECK(snapshot(other->state_dict()) == snapshot(model->state_dict()));
}

TEST_CASE("checkpoint: strict load_model lists missing, unexpected and mismatched names", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("wrong.safetensors");
  manual_seed(5);
  auto model = make_model();
  nn::StateDict state = model->state_dict();
  state.erase("0.weight");
  state["9.bias"] = zeros({4});
  state["3.weight"] = zeros({12, 15});
  nn::save_safetensors(path, state);

  const auto before = snapshot(model->state_dict());
  manual_seed(6);
  auto other = make_model();
  const auto other_before = snapshot(other->state_dict());
  CHECK_THROWS_WITH(nn::load_model(path, *other),
                    Contains("load_model: '" + path + "'") && Contains("missing keys: 0.weight") &&
                        Contains("unexpected keys: 9.bias") && Contains("3.weight (expected [12, 16], got [12, 15])"));
  CHECK(snapshot(other->state_dict()) == other_before);  // a failed load changes nothing

  // Without strict, names that do not match are skipped -- but a wrong shape is still an error.
  CHECK_THROWS_WITH(nn::load_model(path, *other, /*strict=*/false), Contains("3.weight"));
  state["3.weight"] = model->state_dict().at("3.weight");
  nn::save_safetensors(path, state);
  nn::load_model(path, *other, /*strict=*/false);
  const auto after = snapshot(other->state_dict());
  CHECK(after.at("0.weight") == other_before.at("0.weight"));  // missing: kept
  CHECK(after.at("3.weight") == before.at("3.weight"));        // present: loaded
}

TEST_CASE("checkpoint: load_checkpoint rejects what is not its own checkpoint and changes nothing", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("run.ckpt");
  const Batches data = make_batches();
  manual_seed(7);
  auto model = make_model();
  auto opt = make_optimizer("sgd", *model);
  train(*model, *opt, data, 0, 2);
  nn::TrainingState state;
  state.step = 2;
  nn::save_checkpoint(path, *model, *opt, state);

  // The target: another model and optimizer that have trained a little themselves.
  manual_seed(8);
  auto target = make_model();
  auto target_opt = make_optimizer("sgd", *target);
  train(*target, *target_opt, data, 0, 1);
  const auto model_before = snapshot(target->state_dict());
  const auto opt_before = snapshot(target_opt->state_dict());
  auto unchanged = [&] {
    CHECK(snapshot(target->state_dict()) == model_before);
    CHECK(snapshot(target_opt->state_dict()) == opt_before);
  };

  SECTION("a weights-only file") {
    const std::string weights = dir.file("weights.safetensors");
    nn::save_model(weights, *model);
    CHECK_THROWS_WITH(nn::load_checkpoint(weights, *target, *target_opt),
                      Contains(weights) && Contains("not a ringgrad training checkpoint") && Contains("got none"));
  }
  SECTION("another format tag") {
    std::map<std::string, std::string> metadata;
    nn::StateDict tensors = nn::load_safetensors(path, &metadata);
    metadata["format"] = "ringgrad.checkpoint.v0";
    nn::save_safetensors(path, tensors, metadata);
    CHECK_THROWS_WITH(nn::load_checkpoint(path, *target, *target_opt),
                      Contains("\"ringgrad.checkpoint.v0\"") && Contains("expected metadata \"format\""));
  }
  SECTION("a malformed step") {
    std::map<std::string, std::string> metadata;
    nn::StateDict tensors = nn::load_safetensors(path, &metadata);
    metadata["step"] = "12x";
    nn::save_safetensors(path, tensors, metadata);
    CHECK_THROWS_WITH(nn::load_checkpoint(path, *target, *target_opt),
                      Contains("metadata \"step\" must be an integer, got '12x'"));
  }
  SECTION("a negative rng offset") {
    std::map<std::string, std::string> metadata;
    nn::StateDict tensors = nn::load_safetensors(path, &metadata);
    metadata["rng_offset"] = "-1";
    nn::save_safetensors(path, tensors, metadata);
    CHECK_THROWS_WITH(nn::load_checkpoint(path, *target, *target_opt), Contains("\"rng_offset\" must be an integer"));
  }
  SECTION("a tensor of neither part") {
    std::map<std::string, std::string> metadata;
    nn::StateDict tensors = nn::load_safetensors(path, &metadata);
    tensors["stray"] = zeros({1});
    nn::save_safetensors(path, tensors, metadata);
    CHECK_THROWS_WITH(nn::load_checkpoint(path, *target, *target_opt), Contains("unexpected tensor 'stray'"));
  }
  SECTION("another optimizer type") {
    auto adamw = make_optimizer("adamw", *target);
    CHECK_THROWS_WITH(nn::load_checkpoint(path, *target, *adamw),
                      Contains("holds the state of a SGD, but it is being loaded into a AdamW"));
  }
  SECTION("an optimizer state that does not fit") {
    std::map<std::string, std::string> metadata;
    nn::StateDict tensors = nn::load_safetensors(path, &metadata);
    tensors.erase("optimizer.state.0.momentum_buffer");
    tensors["optimizer.state.0.momentum_buffer"] = zeros({3});
    nn::save_safetensors(path, tensors, metadata);
    CHECK_THROWS_WITH(nn::load_checkpoint(path, *target, *target_opt),
                      Contains("load_checkpoint: '" + path + "'") && Contains("state.0.momentum_buffer"));
  }
  SECTION("a model state that does not fit, after the optimizer state did") {
    // The optimizer part loads, then the model part fails: the optimizer must get its old state back.
    std::map<std::string, std::string> metadata;
    nn::StateDict tensors = nn::load_safetensors(path, &metadata);
    tensors["model.renamed.weight"] = tensors.at("model.0.weight");
    tensors.erase("model.0.weight");
    nn::save_safetensors(path, tensors, metadata);
    CHECK_THROWS_WITH(nn::load_checkpoint(path, *target, *target_opt),
                      Contains("missing keys: 0.weight") && Contains("unexpected keys: renamed.weight"));
  }
  SECTION("a truncated file") {
    fs::resize_file(path, fs::file_size(path) - 3);
    CHECK_THROWS_WITH(nn::load_checkpoint(path, *target, *target_opt), Contains("load_safetensors: '" + path + "'"));
  }
  unchanged();
}

TEST_CASE("checkpoint: save_checkpoint writes through a symlink and refuses a FIFO", "[checkpoint]") {
  // The usual layout: "latest.ckpt" -> "run-2.ckpt". Replacing the link would leave run-2.ckpt
  // stale; writing a FIFO's path must not turn it into a file (nn/file_io.h).
  TempDir dir;
  manual_seed(3);
  auto model = make_model();
  auto opt = make_optimizer("sgd", *model);
  nn::TrainingState state;
  state.step = 1;
  nn::save_checkpoint(dir.file("run-2.ckpt"), *model, *opt, state);
  fs::create_symlink("run-2.ckpt", dir.file("latest.ckpt"));
  state.step = 2;
  nn::save_checkpoint(dir.file("latest.ckpt"), *model, *opt, state);
  CHECK(fs::is_symlink(dir.file("latest.ckpt")));
  CHECK(nn::load_checkpoint(dir.file("run-2.ckpt"), *model, *opt).step == 2);

  const std::string fifo = dir.file("pipe.ckpt");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(nn::save_checkpoint(fifo, *model, *opt, state), Contains("is a FIFO"));
  CHECK_THROWS_WITH(nn::load_checkpoint(fifo, *model, *opt), Contains("is a FIFO"));
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
}
