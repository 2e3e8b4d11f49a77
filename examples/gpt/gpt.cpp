// examples/gpt/gpt.cpp: train a small GPT on the bytes of a text corpus, then sample text from it.
//
//   ./build/examples/gpt                                    # 2 layers, width 128, 4 heads, context 64
//   ./build/examples/gpt --steps 2000 --save gpt.safetensors
//   ./build/examples/gpt --load gpt.safetensors --steps 0 --sample 400 --prompt "Q: "
//   ./build/examples/gpt --dp cpu:0,cpu:1                   # DataParallel over two devices
//   ./build/tools/ringrun --nproc-per-node 2 ./build/examples/gpt --ddp   # DDP, two processes
//
// The corpus is Debian's `fortunes` package (apt-get install fortunes): about 2.5 MB of fortune
// cookies -- quotations, jokes, definitions, verse -- in plain English text, installed by a package
// CI can install, and large enough that a byte-level model learns words, spelling and punctuation
// in a few minutes on two cores. Every regular file of --data (a directory; the .dat index files and
// the .u8 links are skipped) is read in name order; the last 10% of the bytes are held out to
// measure the loss on text the model never trained on. Any text file works as --data too.
//
// Training is AdamW with a linear warm-up and a cosine decay of the learning rate, the gradient's
// norm clipped: nanoGPT's recipe at a size for a CPU, except that the weight decay applies to every
// parameter (nanoGPT spares biases and LayerNorms). Each step takes --batch-size random
// windows of --context + 1 bytes; the model predicts every byte from the ones before it. A line every
// --log-every steps gives the training loss, the learning rate, tokens/s and the time left; the
// held-out loss is measured every --eval-every steps and at the end. With --save the weights are
// written as safetensors (examples/gpt/model.h names them); --load reads them back.
//
// With --dp or --ddp the same global batch is split across the devices or processes (every rank
// draws the same windows and takes its share), so the steps are those of one device: the three ways
// end at the same held-out loss, up to float32 rounding (the test example_gpt_single_dp_ddp_agree).
// Under --ddp rank 0 prints, evaluates, saves and samples; the loss it prints is the mean over ranks.
// Exit status: 0, or 1 when --target-loss is given and the final held-out loss is above it.
#include <ringgrad/ringgrad.h>
#include <ringgrad/nn/file_io.h>  // check_writable: --save is checked before training

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../device_list.h"
#include "model.h"
#include "tools/cli/flags.h"

using namespace ringgrad;
using examples::ensure_cpu_devices;
using examples::parse_devices;
namespace fs = std::filesystem;

namespace {

struct Args {
  std::string data = "/usr/share/games/fortunes";
  std::string device = "cpu";
  std::string dp;    // "cpu:0,cpu:1": DataParallel over these devices
  bool ddp = false;  // DistributedDataParallel: this process is one rank of a ringrun job
  int64_t steps = 300;
  int64_t batch_size = 16;
  int64_t context = 64;
  int64_t layers = 2;
  int64_t width = 128;
  int64_t heads = 4;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;
  int64_t warmup = 30;
  double weight_decay = 0.1;
  double clip = 1.0;
  int64_t seed = 1;
  int64_t log_every = 25;
  int64_t eval_every = 100;
  int64_t eval_batches = 16;
  std::string save, load;
  int64_t sample = 200;
  std::string prompt = "\n";
  double temperature = 0.8;
  double target_loss = 0.0;
};

// The corpus as bytes: one file, or every regular file of a directory in name order.
std::vector<uint8_t> read_corpus(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  RINGGRAD_CHECK(!ec && fs::exists(status), "gpt: --data ", path,
                 ": no such file or directory; install Debian's fortunes package (apt-get install fortunes) or pass "
                 "a text file");
  std::vector<fs::path> files;
  if (fs::is_directory(status)) {
    for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
      if (entry.is_symlink() || !entry.is_regular_file() || entry.path().extension() == ".dat") continue;
      files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::vector<uint8_t> bytes;
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    RINGGRAD_CHECK(in.good(), "gpt: cannot read ", file.string());
    bytes.insert(bytes.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return bytes;
}

// [B, T] int64 tokens: row b is text[starts[b] + shift, starts[b] + shift + T).
Tensor windows(const std::vector<uint8_t>& text, const std::vector<int64_t>& starts, int64_t t, int64_t shift,
               Device device) {
  std::vector<int64_t> v;
  v.reserve(starts.size() * static_cast<size_t>(t));
  for (const int64_t s : starts)
    for (int64_t i = 0; i < t; ++i) v.push_back(text[static_cast<size_t>(s + shift + i)]);
  return from_vector(v, Shape{static_cast<int64_t>(starts.size()), t}, device);
}

// The mean cross-entropy of predicting each byte of y from the bytes of x before it.
Tensor loss_of(const Tensor& logits, const Tensor& y) {
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
}

// The learning rate of step s: a linear warm-up to lr, then a cosine down to lr * min_lr_ratio.
double lr_at(const Args& a, int64_t s) {
  if (s < a.warmup) return a.lr * static_cast<double>(s + 1) / static_cast<double>(a.warmup);
  const double progress =
      static_cast<double>(s - a.warmup) / static_cast<double>(std::max<int64_t>(1, a.steps - a.warmup));
  const double min_lr = a.lr * a.min_lr_ratio;
  return min_lr + 0.5 * (a.lr - min_lr) * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
}

// The mean loss over eval_batches fixed windows of the held-out text (examples/gpt/torch_gpt.py
// computes the same windows).
double held_out_loss(gpt::Gpt& model, const std::vector<uint8_t>& val, const Args& a, Device device) {
  NoGradGuard no_grad;
  model.eval();
  const int64_t span = static_cast<int64_t>(val.size()) - a.context - 1;
  double total = 0;
  for (int64_t b = 0; b < a.eval_batches; ++b) {
    std::vector<int64_t> starts;
    for (int64_t r = 0; r < a.batch_size; ++r)
      starts.push_back(span * (b * a.batch_size + r) / (a.eval_batches * a.batch_size));
    const Tensor x = windows(val, starts, a.context, 0, device), y = windows(val, starts, a.context, 1, device);
    total += loss_of(model.forward(x), y).item<double>();
  }
  model.train();
  return total / static_cast<double>(a.eval_batches);
}

// Continues `prompt` by a.sample bytes, each drawn from softmax(logits / temperature).
std::string sample_text(gpt::Gpt& model, const std::string& prompt, const Args& a, Device device,
                        std::mt19937_64& rng) {
  NoGradGuard no_grad;
  model.eval();
  std::vector<int64_t> tokens;
  for (const char c : prompt) tokens.push_back(static_cast<unsigned char>(c));
  std::string out;
  for (int64_t n = 0; n < a.sample; ++n) {
    const int64_t keep = std::min<int64_t>(a.context, static_cast<int64_t>(tokens.size()));
    const std::vector<int64_t> last(tokens.end() - keep, tokens.end());
    const Tensor logits = model.forward(from_vector(last, Shape{1, keep}, device));
    const Tensor next = logits.narrow(1, keep - 1, 1).reshape({-1}) / a.temperature;
    const std::vector<double> p = softmax(next, 0).to(Device::cpu(), DType::f64).to_vector<double>();
    std::discrete_distribution<int> pick(p.begin(), p.end());
    const int byte = pick(rng);
    tokens.push_back(byte);
    // Printable bytes as they are, a newline or tab too; anything else as '?', so a terminal is safe.
    out.push_back((byte >= 32 && byte < 127) || byte == '\n' || byte == '\t' ? static_cast<char>(byte) : '?');
  }
  model.train();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  cli::FlagParser flags("gpt", "Trains a small GPT on the bytes of a text corpus, then samples text from it.");
  flags.add_string("--data", &a.data, "a text file, or a directory whose regular files are read in name order")
      .metavar("PATH");
  flags.add_string("--device", &a.device, "cpu, cpu:N or cuda:N (with --ddp and a GPU: cuda:LOCAL_RANK)")
      .metavar("DEVICE");
  flags.add_string("--dp", &a.dp, "train with DataParallel over these devices, e.g. cpu:0,cpu:1").metavar("LIST");
  flags.add_bool("--ddp", &a.ddp, "DistributedDataParallel: one process per device, started by ringrun");
  flags.add_int("--steps", &a.steps, "optimizer steps (0: no training, e.g. to sample from --load)", 0, 100000000);
  flags.add_int("--batch-size", &a.batch_size, "windows of text per step (the global batch)", 1, 1 << 20);
  flags.add_int("--context", &a.context, "bytes the model sees at once (its block size)", 2, 1 << 16);
  flags.add_int("--layers", &a.layers, "transformer blocks", 1, 1024);
  flags.add_int("--width", &a.width, "embedding width C", 1, 1 << 16);
  flags.add_int("--heads", &a.heads, "attention heads (must divide --width)", 1, 1024);
  flags.add_double("--lr", &a.lr, "peak learning rate of AdamW", 1e-9, 10.0);
  flags.add_double("--min-lr-ratio", &a.min_lr_ratio, "the cosine's final rate, as a fraction of --lr", 0.0, 1.0);
  flags.add_int("--warmup", &a.warmup, "steps of linear warm-up", 1, 100000000);
  flags.add_double("--weight-decay", &a.weight_decay, "AdamW's decoupled weight decay", 0.0, 10.0);
  flags.add_double("--clip", &a.clip, "largest gradient norm (0: no clipping)", 0.0, 1e9);
  flags.add_int("--seed", &a.seed, "seed of the initial weights, the windows and the samples", 0, INT64_MAX);
  flags.add_int("--log-every", &a.log_every, "steps between progress lines", 1, 100000000);
  flags.add_int("--eval-every", &a.eval_every, "steps between held-out losses", 1, 100000000);
  flags.add_int("--eval-batches", &a.eval_batches, "batches in a held-out loss", 1, 100000);
  flags.add_string("--save", &a.save, "write the weights here (safetensors) after training").metavar("PATH");
  flags.add_string("--load", &a.load, "read the weights from here before training").metavar("PATH");
  flags.add_int("--sample", &a.sample, "bytes of text to generate at the end (0: none)", 0, 1 << 20);
  flags.add_string("--prompt", &a.prompt, "text the sample continues", "a newline");
  flags.add_double("--temperature", &a.temperature, "divides the logits before sampling", 1e-3, 100.0);
  flags.add_double("--target-loss", &a.target_loss, "exit 1 when the final held-out loss is above this (0: never)", 0.0,
                   1e9);
  flags.parse(argc, argv);
  if (a.ddp && !a.dp.empty()) flags.fail("--dp and --ddp are alternatives, got both");
  if (!a.save.empty()) {  // a bad destination is found now, not after the training it would lose
    try {
      nn::check_writable("gpt: --save", a.save);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 2;
    }
  }

  try {
    const std::vector<Device> dp_devices = a.dp.empty() ? std::vector<Device>{} : parse_devices(a.dp);
    ensure_cpu_devices(dp_devices);
    Device device = dp_devices.empty() ? Device::parse(a.device) : dp_devices[0];
    if (a.ddp && device.is_cuda()) {  // one process per GPU: rank r of a host on cuda:LOCAL_RANK
      const char* local_rank = std::getenv("LOCAL_RANK");
      device = Device::cuda(local_rank ? std::atoi(local_rank) : 0);
    }
    std::shared_ptr<parallel::ProcessGroup> pg;
    if (a.ddp) {
      pg = parallel::init_process_group("ring");
      // Processes on one machine share its cores (torchrun sets OMP_NUM_THREADS=1 for the same reason).
      const char* local = std::getenv("LOCAL_WORLD_SIZE");
      const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      set_num_threads(std::max(1, cores / (local ? std::max(1, std::atoi(local)) : 1)));
    }
    const int world = pg ? pg->size() : 1, rank = pg ? pg->rank() : 0;
    RINGGRAD_CHECK(a.batch_size % world == 0, "gpt: --batch-size ", a.batch_size, " must divide among the ", world,
                   " processes");
    const bool talks = rank == 0;  // under --ddp only rank 0 prints, evaluates, saves and samples

    const std::vector<uint8_t> corpus = read_corpus(a.data);
    const size_t split = corpus.size() * 9 / 10;
    const std::vector<uint8_t> train(corpus.begin(), corpus.begin() + static_cast<std::ptrdiff_t>(split));
    const std::vector<uint8_t> val(corpus.begin() + static_cast<std::ptrdiff_t>(split), corpus.end());
    RINGGRAD_CHECK(static_cast<int64_t>(val.size()) > a.context + 1, "gpt: --data ", a.data, " holds ", corpus.size(),
                   " bytes, too few for a context of ", a.context, " (10% of it is held out)");

    manual_seed(static_cast<uint64_t>(a.seed));
    gpt::Config config;
    config.context = a.context;
    config.layers = a.layers;
    config.width = a.width;
    config.heads = a.heads;
    auto model = std::make_shared<gpt::Gpt>(config);
    if (!a.load.empty()) nn::load_model(a.load, *model);
    model->to(device);
    // The wrappers hold the model: dp->module() and ddp->module() are `model` itself.
    std::unique_ptr<parallel::DataParallel<gpt::Gpt>> dp;
    if (!dp_devices.empty()) dp = std::make_unique<parallel::DataParallel<gpt::Gpt>>(model, dp_devices);
    std::unique_ptr<parallel::DistributedDataParallel<gpt::Gpt>> ddp;
    if (pg) ddp = std::make_unique<parallel::DistributedDataParallel<gpt::Gpt>>(model, pg);
    int64_t params = 0;
    for (const Tensor& p : model->parameters()) params += p.numel();
    const std::string where = dp    ? "DataParallel " + a.dp
                              : ddp ? "DistributedDataParallel, " + std::to_string(world) + " processes"
                                    : device.str();
    if (talks) {
      std::printf("# gpt: %lld layers, width %lld, %lld heads, context %lld: %.2fM parameters; %s\n",
                  static_cast<long long>(a.layers), static_cast<long long>(a.width), static_cast<long long>(a.heads),
                  static_cast<long long>(a.context), static_cast<double>(params) / 1e6, where.c_str());
      std::printf("# data: %s, %zu bytes (%zu train, %zu held out)\n", a.data.c_str(), corpus.size(), train.size(),
                  val.size());
    }

    nn::optim::AdamW optimizer(model->parameters(),
                               nn::optim::AdamOptions(a.lr).betas(0.9, 0.95).weight_decay(a.weight_decay));
    std::mt19937_64 rng(static_cast<uint64_t>(a.seed));  // the same draws on every rank
    std::uniform_int_distribution<int64_t> start_of(0, static_cast<int64_t>(train.size()) - a.context - 1);
    const int64_t share = a.batch_size / world;
    const auto t0 = std::chrono::steady_clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    double loss_sum = 0;
    int64_t loss_count = 0;
    for (int64_t step = 0; step < a.steps; ++step) {
      std::vector<int64_t> starts;
      for (int64_t b = 0; b < a.batch_size; ++b) starts.push_back(start_of(rng));
      starts = std::vector<int64_t>(starts.begin() + rank * share, starts.begin() + (rank + 1) * share);
      const Tensor x = windows(train, starts, a.context, 0, device), y = windows(train, starts, a.context, 1, device);
      optimizer.set_lr(lr_at(a, step));
      optimizer.zero_grad();
      const Tensor logits = dp ? dp->forward(x) : ddp ? ddp->forward(x) : model->forward(x);
      const Tensor loss = loss_of(logits, y);
      loss.backward();  // under --ddp the gradients arrive averaged over the ranks
      if (a.clip > 0) nn::optim::clip_grad_norm_(model->parameters(), a.clip);
      optimizer.step();
      loss_sum += loss.item<double>();
      ++loss_count;
      const int64_t done = step + 1;
      if (done % a.log_every == 0 || done == a.steps) {
        double mean = loss_sum / static_cast<double>(loss_count);
        if (pg) {  // the mean over the ranks' shards: the loss of the whole batch
          const Tensor t = full({1}, mean, DType::f64);
          pg->all_reduce(t)->wait();
          mean = t.item<double>() / world;
        }
        const double elapsed = seconds();
        const double tokens = static_cast<double>(done * a.batch_size * a.context);
        if (talks) {
          std::printf("step %6lld/%lld  loss %.4f  lr %.2e  %.0f tokens/s  %.1f s elapsed, %.1f s left\n",
                      static_cast<long long>(done), static_cast<long long>(a.steps), mean, optimizer.lr(),
                      tokens / elapsed, elapsed,
                      elapsed / static_cast<double>(done) * static_cast<double>(a.steps - done));
          std::fflush(stdout);
        }
        loss_sum = 0;
        loss_count = 0;
      }
      if (talks && done % a.eval_every == 0 && done != a.steps)
        std::printf("step %6lld  held-out loss %.4f\n", static_cast<long long>(done),
                    held_out_loss(*model, val, a, device));
    }
    if (!talks) return 0;
    const double final_loss = held_out_loss(*model, val, a, device);
    std::printf("held-out loss %.6f after %lld steps (%.2f bits per byte), %.1f s\n", final_loss,
                static_cast<long long>(a.steps), final_loss / std::log(2.0), seconds());
    if (!a.save.empty()) {
      nn::save_model(a.save, *model);
      std::printf("# saved the weights to %s\n", a.save.c_str());
    }
    if (a.sample > 0)
      std::printf("--- sample ---\n%s%s\n--- end ---\n", a.prompt.c_str(),
                  sample_text(*model, a.prompt, a, device, rng).c_str());
    if (a.target_loss > 0 && final_loss > a.target_loss) {
      std::fprintf(stderr, "gpt: the held-out loss %.4f is above --target-loss %.4f\n", final_loss, a.target_loss);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
