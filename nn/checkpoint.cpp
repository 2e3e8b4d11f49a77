// nn/checkpoint.cpp: weights-only files and training checkpoints, both as safetensors.
#include <ringgrad/nn/checkpoint.h>

#include <charconv>
#include <system_error>

#include <ringgrad/nn/safetensors.h>

namespace ringgrad {
namespace nn {
namespace {

const std::string kModelPrefix = "model.";
const std::string kOptimizerPrefix = "optimizer.";
const std::string kExtraPrefix = "extra.";

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// Adds "<op>: '<path>': " in front of an error from a layer below (Module, Optimizer), so the
// message says which file did not fit.
template <typename Fn>
void with_context(const char* op, const std::string& path, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    throw Error(detail::str(op, ": '", path, "': ", e.what()));
  }
}

// The whole string must be the number: "12x", "", "-1" for an unsigned, and overflow all fail.
template <typename T>
T parse_integer(const std::map<std::string, std::string>& metadata, const std::string& key, const std::string& path) {
  const auto it = metadata.find(key);
  RINGGRAD_CHECK(it != metadata.end(), "load_checkpoint: '", path, "': the metadata has no \"", key, "\" entry");
  const std::string& text = it->second;
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  RINGGRAD_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(), "load_checkpoint: '", path,
                 "': metadata \"", key, "\" must be an integer, got '", detail::printable(text), "'");
  return value;
}

}  // namespace

void save_model(const std::string& path, const Module& model) { save_safetensors(path, model.state_dict()); }

void load_model(const std::string& path, Module& model, bool strict) {
  std::map<std::string, std::string> metadata;
  StateDict state = load_safetensors(path, &metadata);
  // A training checkpoint holds the weights under "model.": load those, so one file serves both.
  const auto format = metadata.find("format");
  if (format != metadata.end() && format->second == kCheckpointFormat) {
    StateDict weights;
    for (auto& [key, t] : state)
      if (starts_with(key, kModelPrefix)) weights.emplace(key.substr(kModelPrefix.size()), t);
    state = std::move(weights);
  }
  with_context("load_model", path, [&] { model.load_state_dict(state, strict); });
}

void capture_rng_state(TrainingState& state, const Generator& generator) {
  state.rng_seed = generator.seed();
  state.rng_offset = generator.offset();
}

void restore_rng_state(const TrainingState& state, Generator& generator) {
  generator.set_state(state.rng_seed, state.rng_offset);
}

void save_checkpoint(const std::string& path, const Module& model, const optim::Optimizer& optimizer,
                     const TrainingState& state) {
  StateDict tensors;
  for (auto& [name, t] : model.state_dict()) tensors.emplace(kModelPrefix + name, t);
  for (auto& [name, t] : optimizer.state_dict()) tensors.emplace(kOptimizerPrefix + name, t);
  std::map<std::string, std::string> metadata = {
      {"format", kCheckpointFormat},
      {"optimizer", optimizer.name()},
      {"step", std::to_string(state.step)},
      {"epoch", std::to_string(state.epoch)},
      {"rng_seed", std::to_string(state.rng_seed)},
      {"rng_offset", std::to_string(state.rng_offset)},
  };
  for (const auto& [key, value] : state.extra) metadata.emplace(kExtraPrefix + key, value);
  save_safetensors(path, tensors, metadata);
}

TrainingState load_checkpoint(const std::string& path, Module& model, optim::Optimizer& optimizer) {
  // 1. The file: every structural check happens in load_safetensors.
  std::map<std::string, std::string> metadata;
  const StateDict tensors = load_safetensors(path, &metadata);

  // 2. The metadata: format tag, optimizer type, TrainingState.
  const auto format = metadata.find("format");
  RINGGRAD_CHECK(format != metadata.end() && format->second == kCheckpointFormat, "load_checkpoint: '", path,
                 "': not a ringgrad training checkpoint (expected metadata \"format\": \"", kCheckpointFormat,
                 "\", got ",
                 format == metadata.end() ? std::string("none") : "\"" + detail::printable(format->second) + "\"",
                 "); a file of weights only loads with load_model");
  const auto saved_optimizer = metadata.find("optimizer");
  RINGGRAD_CHECK(saved_optimizer != metadata.end() && saved_optimizer->second == optimizer.name(), "load_checkpoint: '",
                 path, "': the checkpoint holds the state of a ",
                 saved_optimizer == metadata.end() ? std::string("(unnamed) optimizer")
                                                   : detail::printable(saved_optimizer->second),
                 ", but it is being loaded into a ", optimizer.name());
  TrainingState state;
  state.step = parse_integer<int64_t>(metadata, "step", path);
  state.epoch = parse_integer<int64_t>(metadata, "epoch", path);
  state.rng_seed = parse_integer<uint64_t>(metadata, "rng_seed", path);
  state.rng_offset = parse_integer<uint64_t>(metadata, "rng_offset", path);
  for (const auto& [key, value] : metadata)
    if (starts_with(key, kExtraPrefix)) state.extra.emplace(key.substr(kExtraPrefix.size()), value);

  // 3. Split the tensors; a key of neither part means the file is not what it claims.
  StateDict model_state, optimizer_state;
  for (const auto& [key, t] : tensors) {
    if (starts_with(key, kModelPrefix)) {
      model_state.emplace(key.substr(kModelPrefix.size()), t);
    } else if (starts_with(key, kOptimizerPrefix)) {
      optimizer_state.emplace(key.substr(kOptimizerPrefix.size()), t);
    } else {
      throw Error(detail::str("load_checkpoint: '", path, "': unexpected tensor '", detail::printable(key),
                              R"(' (expected names starting with "model." or "optimizer."))"));
    }
  }

  // 4. Both loads check everything before they change anything. The optimizer goes first; if the
  // model then refuses its part, the optimizer gets its old state back, so a failed load leaves
  // both as they were.
  const StateDict optimizer_before = optimizer.state_dict();
  with_context("load_checkpoint", path, [&] { optimizer.load_state_dict(optimizer_state); });
  try {
    with_context("load_checkpoint", path, [&] { model.load_state_dict(model_state, /*strict=*/true); });
  } catch (...) {
    optimizer.load_state_dict(optimizer_before);
    throw;
  }
  return state;
}

}  // namespace nn
}  // namespace ringgrad
