// parallel/distributed_data_parallel.cpp: the model check across ranks, the broadcasts, arming.
#include <ringgrad/parallel/distributed_data_parallel.h>

#include <sstream>

#include <ringgrad/core/autograd/grad_mode.h>
#include <ringgrad/core/ops.h>

namespace ringgrad {
namespace detail {

using namespace parallel;  // the module-independent half of a parallel:: wrapper, in parallel's terms
namespace {

// One line per parameter and buffer: what must agree on every rank (not the device index: rank r
// legitimately uses cuda:r).
std::vector<std::string> describe_model(const nn::Module& module) {
  std::vector<std::string> lines;
  for (const auto& [name, t] : module.named_parameters())
    lines.push_back(
        detail::str("parameter '", name, "' ", t.shape(), " ", t.dtype(), t.requires_grad() ? "" : " (frozen)"));
  for (const auto& [name, t] : module.named_buffers())
    lines.push_back(detail::str("buffer '", name, "' ", t.shape(), " ", t.dtype()));
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  return text;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

Device device_of(const nn::Module& module) {
  const auto params = module.named_parameters();
  return params.empty() ? Device::cpu() : params.front().second.device();
}

}  // namespace

DistributedDataParallelCore::DistributedDataParallelCore(nn::Module& module, std::shared_ptr<ProcessGroup> group,
                                                         const DDPOptions& options)
    : module_(module), group_(std::move(group)), options_(options) {
  RINGGRAD_CHECK(group_ != nullptr, "DistributedDataParallel: no process group; call init_process_group() first");
  check_same_model_on_every_rank();
  // Every replica starts from rank 0's values: random initialisation differs between processes.
  std::vector<Tensor> state;
  for (const Tensor& p : module_.parameters()) state.push_back(p);
  for (const auto& [name, b] : module_.named_buffers()) state.push_back(b);
  broadcast_from_rank0(state);
  std::vector<std::pair<std::string, Tensor>> named;
  for (const auto& [name, p] : module_.named_parameters()) named.emplace_back(name, p);
  reducer_ = std::make_unique<Reducer>(named, group_, options_);
}

// Each rank describes its model as text; the texts are all-gathered (lengths first, then the bytes
// padded to the longest), and every rank compares every other's with rank 0's. All ranks see the
// same texts, so they all reach the same verdict -- nobody is left waiting in a collective.
void DistributedDataParallelCore::check_same_model_on_every_rank() {
  const int world = group_->size();
  if (world == 1) return;
  // The backend says where its collectives want tensors: NCCL moves only GPU memory; the ring works
  // on host memory (it would stage GPU tensors there).
  const Device device = group_->collective_device(device_of(module_));
  const std::string mine = join_lines(describe_model(module_));

  std::vector<Tensor> lengths;
  lengths.reserve(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) lengths.push_back(zeros({1}, TensorOptions(DType::i64).device(device)));
  group_->all_gather(lengths, from_vector<int64_t>({static_cast<int64_t>(mine.size())}, {1}, device))->wait();
  int64_t longest = 1;
  std::vector<int64_t> sizes;
  for (const Tensor& l : lengths) {
    sizes.push_back(l.to_vector<int64_t>()[0]);
    longest = std::max(longest, sizes.back());
  }
  std::vector<uint8_t> padded(mine.begin(), mine.end());
  padded.resize(static_cast<size_t>(longest), 0);
  std::vector<Tensor> texts;
  texts.reserve(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) texts.push_back(zeros({longest}, TensorOptions(DType::u8).device(device)));
  group_->all_gather(texts, from_vector<uint8_t>(padded, {longest}, device))->wait();

  std::vector<std::vector<std::string>> models;
  for (size_t r = 0; r < texts.size(); ++r) {
    const std::vector<uint8_t> bytes = texts[r].to_vector<uint8_t>();
    models.push_back(split_lines(std::string(bytes.begin(), bytes.begin() + sizes[r])));
  }
  for (size_t r = 1; r < models.size(); ++r) {
    const auto& a = models[0];
    const auto& b = models[r];
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      const std::string on0 = i < a.size() ? a[i] : "nothing";
      const std::string onr = i < b.size() ? b[i] : "nothing";
      RINGGRAD_CHECK(on0 == onr, "DistributedDataParallel: the ranks hold different models: entry ", i, " is ", on0,
                     " on rank 0 but ", onr, " on rank ", r, " (", a.size(), " vs ", b.size(),
                     " parameters and buffers); every rank must build the same model");
    }
  }
}

void DistributedDataParallelCore::broadcast_from_rank0(const std::vector<Tensor>& tensors) {
  if (group_->size() == 1) return;
  std::vector<std::shared_ptr<Work>> works;
  works.reserve(tensors.size());
  for (const Tensor& t : tensors) works.push_back(group_->broadcast(t, 0));
  for (auto& w : works) w->wait();
}

void DistributedDataParallelCore::before_forward() {
  if (!options_.broadcast_buffers()) return;
  std::vector<Tensor> buffers;
  for (const auto& [name, b] : module_.named_buffers()) buffers.push_back(b);
  broadcast_from_rank0(buffers);
}

void DistributedDataParallelCore::after_forward(const Tensor& output, SteadyTime start) {
  reducer_->prepare_for_backward(output, start, std::chrono::steady_clock::now());
}

}  // namespace detail
}  // namespace ringgrad
