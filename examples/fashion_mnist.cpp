// examples/fashion_mnist.cpp: train an MLP on Fashion-MNIST, the way one would with PyTorch.
//
//   ./build/examples/fashion_mnist --epochs 15 --optimizer sgd --save run.ckpt
//   ./build/examples/fashion_mnist --resume run.ckpt --save run.ckpt   # continue after a crash
//   (--stop-after N ends the first run after N epochs, to try it: the resumed run prints the same
//   numbers, bit for bit, as one that never stopped; the checkpoint records --epochs, --batch-size,
//   --lr, --optimizer, --hidden and --seed, so --resume needs none of them, and refuses a different one)
//   ./build/examples/fashion_mnist --dp cpu:0,cpu:1                    # DataParallel on two devices
//   ./build/tools/ringrun --nproc-per-node 2 ./build/examples/fashion_mnist --ddp   # DDP, 2 processes
//
// The model is a user-defined module (nn::Cloneable + reset(), see nn/module.h) so its layers are
// typed members: model->fc1->weight. Each epoch prints loss, accuracy, samples/s and time left
// (and, when it takes longer than --progress-every seconds, a progress line meanwhile); the end
// prints the test accuracy. --help lists every flag. With --save, a training checkpoint (weights, optimizer state,
// epoch, RNG) is written after every epoch, atomically; --resume continues bitwise where it left.
// Exit status: 0, or 1 when --target is given and the test accuracy falls short of it.
//
// With --dp the same loop runs through parallel::DataParallel: the batch stays on the first device,
// and dp.forward() scatters it, replicates the model, runs the replicas on all devices at once and
// gathers the logits back, so the loss, the accuracy and the optimizer code do not change. Where DP
// spends time that DDP (one process per device) will not: every step copies every parameter to every
// device (replicate), all outputs and the loss go through the first device (gather), and the
// gradients are summed on the first device at the end of backward (the Broadcast nodes) while the
// other devices idle. The per-phase times it prints at the end come from dp.timings().
//
// With --ddp each process (started by ringrun) trains its own full replica on its own shard of every
// epoch (DistributedSampler) with batch-size / world-size rows, so the global batch -- and the
// learning-rate schedule -- are those of one device; parallel::DistributedDataParallel averages the
// gradients while backward runs. Rank 0 prints (epoch statistics are summed over the ranks) and saves.
#include <ringgrad/ringgrad.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "progress.h"
#include "tools/cli/flags.h"

using namespace ringgrad;

namespace {

struct Args {
  int64_t epochs = 15;
  int64_t batch_size = 128;
  double lr = 0;  // unless given (or restored): 0.05 for sgd, 0.001 for adamw
  std::string optimizer = "sgd";
  int64_t hidden = 1024;
  std::string device = "cpu:0";
  std::string dp;                  // "cpu:0,cpu:1": train with DataParallel over these devices
  bool ddp = false;                // one process per device under ringrun
  std::string comm_hook = "none";  // with --ddp: how gradients travel (parallel/comm_hook.h)
  uint64_t seed = 0;
  std::string save, resume, data_dir;
  double target = 0;       // minimum test accuracy, 0 = no check
  int64_t stop_after = 0;  // stop after this many epochs, as if the run crashed (to try --resume); 0 = never
  double progress_s = 5;   // seconds between progress lines inside an epoch
};

void add_flags(cli::FlagParser& flags, Args& a) {
  flags.add_int("--epochs", &a.epochs, "passes over the training set", 1, 100000);
  flags.add_int("--batch-size", &a.batch_size, "samples per step, over all devices", 1, 60000);
  flags.add_double("--lr", &a.lr, "peak learning rate of the cosine schedule", 0.0, 1e3)
      .default_text("0.05 for sgd, 0.001 for adamw");
  flags.add_choice("--optimizer", &a.optimizer, {"sgd", "adamw"}, "SGD with Nesterov momentum 0.9, or AdamW");
  flags.add_int("--hidden", &a.hidden, "width of the two hidden layers", 1, 65536);
  flags.add_string("--device", &a.device, "where to train: cpu:K or cuda:K").metavar("DEV");
  flags.add_string("--dp", &a.dp, "train with DataParallel over these devices, e.g. cpu:0,cpu:1")
      .metavar("DEV,DEV,...");
  flags.add_bool("--ddp", &a.ddp, "DistributedDataParallel: one process per device, started by ringrun");
  flags.add_choice("--comm-hook", &a.comm_hook, {"none", "bf16", "fp16"},
                   "with --ddp, how gradients are sent: none, float32; bf16, bfloat16 (half the bytes); fp16, "
                   "float16 (half the bytes, finer than bf16 but only up to 65504)");
  flags.add_int("--seed", &a.seed, "seed of the weights, dropout and data order");
  flags.add_string("--save", &a.save, "write a training checkpoint here after every epoch").metavar("PATH");
  flags.add_string("--resume", &a.resume, "continue the run saved in this checkpoint, with its flags").metavar("PATH");
  flags.add_string("--data", &a.data_dir, "folder of the Fashion-MNIST files", nn::data::FashionMNIST::default_dir())
      .metavar("DIR");
  flags.add_double("--target", &a.target, "exit 1 unless the test accuracy reaches this fraction; 0: no check", 0.0,
                   1.0);
  flags.add_int("--stop-after", &a.stop_after,
                "end after this many epochs, as if it crashed, to try --resume; 0: never", 0, 100000);
  flags.add_double("--progress-every", &a.progress_s, "seconds between progress lines inside an epoch", 0.0, 3600.0);
}

// The flags that define a run: a checkpoint records them, and --resume takes them back, so that the
// resumed run builds the same model and continues the same schedule and data order. The others
// (--device, --save, ...) say where and how this process runs, and may change between runs.
const std::vector<std::string> kRunFlags = {"--epochs", "--batch-size", "--lr", "--optimizer", "--hidden", "--seed"};
const std::string kFlagKey = "flag ";  // TrainingState::extra["flag --hidden"] = "1024"

// --resume PATH: the run flags recorded in the checkpoint replace the defaults; a flag also given
// on this command line must agree. Runs before the model is built, since the model's shape is one
// of them. Returns the flags the checkpoint recorded (none for a checkpoint of an older build).
std::vector<std::string> restore_run_flags(cli::FlagParser& flags, const std::string& path) {
  std::map<std::string, std::string> metadata;
  nn::load_safetensors(path, &metadata);
  std::vector<std::string> found;
  for (const std::string& name : kRunFlags) {
    // nn/checkpoint.cpp stores TrainingState::extra[key] as the metadata entry "extra.<key>".
    const auto it = metadata.find("extra." + kFlagKey + name);
    if (it == metadata.end()) continue;
    found.push_back(name);
    const std::string& recorded = it->second;
    if (flags.was_set(name) && flags.value(name) != recorded)
      flags.fail("--resume " + path + ": the checkpoint was trained with " + name + " " + recorded +
                 ", this command says " + name + " " + flags.value(name) + " (leave " + name +
                 " out to continue the run as it was)");
    try {
      flags.set(name, recorded);
    } catch (const cli::FlagError& e) {
      const std::string why = e.what();  // "fashion_mnist: --hidden expects ...": drop the program's name
      flags.fail("--resume " + path + ": the checkpoint's " + name +
                 " is unusable: " + why.substr(flags.program().size() + 2));
    }
  }
  return found;
}

// 784 -> hidden -> hidden -> 10, ReLU fused into the first two GEMMs, dropout between layers.
struct Classifier : nn::Cloneable<Classifier> {
  Classifier(int64_t hidden, double dropout_p) : hidden(hidden), dropout_p(dropout_p) { reset(); }
  void reset() override {
    using nn::LinearOptions;
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(LinearOptions(784, hidden).activation(Activation::Relu)));
    fc2 = register_module("fc2",
                          std::make_shared<nn::Linear>(LinearOptions(hidden, hidden).activation(Activation::Relu)));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(hidden, 10));
    drop = register_module("drop", std::make_shared<nn::Dropout>(dropout_p));
  }
  Tensor forward(const Tensor& x) override {
    return fc3->forward(drop->forward(fc2->forward(drop->forward(fc1->forward(x)))));
  }
  std::string type_name() const override { return "Classifier"; }

  int64_t hidden;
  double dropout_p;
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
  std::shared_ptr<nn::Dropout> drop;
};

// Fraction of correct predictions over a whole split, in eval mode and without recording a graph.
double evaluate(Classifier& model, nn::data::DataLoader& loader, Device device) {
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0, seen = 0;
  loader.set_epoch(0);
  nn::data::Batch batch;
  while (loader.next(batch)) {
    const Tensor predicted = argmax(model.forward(batch.x.to(device)), 1).to(Device::cpu());
    const Tensor labels = batch.y;
    const int64_t* p = predicted.data<int64_t>();
    const int64_t* y = labels.data<int64_t>();
    for (int64_t i = 0; i < labels.numel(); ++i) correct += p[i] == y[i];
    seen += labels.numel();
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(seen);
}

// "cpu:0,cpu:1" -> {cpu:0, cpu:1}.
std::vector<Device> parse_devices(const std::string& list) {
  std::vector<Device> devices;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    devices.push_back(Device::parse(list.substr(begin, end - begin)));
    begin = end + 1;
  }
  return devices;
}

// Logical CPU devices must exist before first use: make enough for --dp unless the environment
// already chose (RINGGRAD_CPU_DEVICES).
void ensure_cpu_devices(const std::vector<Device>& devices) {
  int needed = 1;
  for (Device d : devices)
    if (d.is_cpu()) needed = std::max(needed, d.index + 1);
  if (needed > 1 && std::getenv("RINGGRAD_CPU_DEVICES") == nullptr) set_cpu_device_count(needed);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args parsed;
    cli::FlagParser flags("fashion_mnist",
                          "Trains an MLP (784-H-H-10) on Fashion-MNIST and reports the test accuracy.");
    add_flags(flags, parsed);
    flags.parse(argc, argv);
    const std::vector<std::string> restored =
        parsed.resume.empty() ? std::vector<std::string>{} : restore_run_flags(flags, parsed.resume);
    if (!flags.was_set("--lr") && std::find(restored.begin(), restored.end(), "--lr") == restored.end())
      parsed.lr = parsed.optimizer == "sgd" ? 0.05 : 1e-3;
    if (parsed.ddp && !parsed.dp.empty()) flags.fail("--dp and --ddp are alternatives, got both");
    if (!parsed.ddp && parsed.comm_hook != "none")
      flags.fail("--comm-hook " + parsed.comm_hook + " needs --ddp (it is how DDP sends gradients)");
    const Args args = parsed;
    const std::vector<Device> dp_devices = args.dp.empty() ? std::vector<Device>{} : parse_devices(args.dp);
    ensure_cpu_devices(dp_devices);
    const Device device = dp_devices.empty() ? Device::parse(args.device) : dp_devices[0];
    // --ddp: this process is one rank of a job (RANK, WORLD_SIZE, ... from ringrun).
    std::shared_ptr<parallel::ProcessGroup> pg;
    if (args.ddp) {
      pg = parallel::init_process_group("ring");
      // Processes on one machine share its cores (torchrun sets OMP_NUM_THREADS=1 for the same reason).
      const char* local = std::getenv("LOCAL_WORLD_SIZE");
      const int local_world = local ? std::max(1, std::atoi(local)) : 1;
      set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_world));
    }
    const int world = pg ? pg->size() : 1, rank = pg ? pg->rank() : 0;
    RINGGRAD_CHECK(args.batch_size % world == 0, "fashion_mnist: --batch-size ", args.batch_size,
                   " must divide among the ", world, " processes");
    // Only rank 0 talks and writes files.
    auto say = [rank](const char* format, auto... values) {
      if (rank == 0) std::printf(format, values...);
    };
    manual_seed(args.seed);

    // Pixel statistics of the training set, as everyone normalises Fashion-MNIST.
    constexpr double kMean = 0.2860, kStd = 0.3530;
    const nn::data::FashionMNIST train_set(nn::data::Split::Train, args.data_dir);
    const nn::data::FashionMNIST test_set(nn::data::Split::Test, args.data_dir);
    nn::data::DataLoaderOptions train_options =
        nn::data::DataLoaderOptions().batch_size(args.batch_size / world).seed(args.seed).normalize(kMean, kStd);
    if (pg)  // each rank its own shard of every epoch, reshuffled per epoch the same way on every rank
      train_options.sampler(std::make_shared<nn::data::DistributedSampler>(
          train_set.size(), world, rank, nn::data::DistributedSamplerOptions().seed(args.seed)));
    nn::data::DataLoader train(train_set, train_options);
    nn::data::DataLoader test(test_set,
                              nn::data::DataLoaderOptions().batch_size(1000).shuffle(false).normalize(kMean, kStd));

    auto model = std::make_shared<Classifier>(args.hidden, /*dropout_p=*/0.2);
    model->to(device);
    // The wrapper holds the model; dp->module() is `model`, and the optimizer updates its parameters.
    std::unique_ptr<parallel::DataParallel<Classifier>> dp;
    if (!dp_devices.empty()) dp = std::make_unique<parallel::DataParallel<Classifier>>(model, dp_devices);
    // DDP holds the model the same way: ddp->module() is `model`. Construction broadcasts rank 0's weights.
    std::unique_ptr<parallel::DistributedDataParallel<Classifier>> ddp;
    if (pg)
      ddp = std::make_unique<parallel::DistributedDataParallel<Classifier>>(
          model, pg, parallel::DDPOptions().comm_hook(parallel::comm_hook_named(args.comm_hook)));
    std::unique_ptr<nn::optim::Optimizer> opt;
    if (args.optimizer == "sgd")
      opt = std::make_unique<nn::optim::SGD>(model->parameters(),
                                             nn::optim::SGDOptions(args.lr).momentum(0.9).nesterov(true));
    else
      opt = std::make_unique<nn::optim::AdamW>(model->parameters(), nn::optim::AdamWOptions(args.lr));
    nn::optim::CosineAnnealingLR schedule(*opt, args.epochs);
    nn::CrossEntropyLoss criterion(nn::CrossEntropyLossOptions().label_smoothing(0.1));

    int64_t first_epoch = 0;
    if (!args.resume.empty()) {
      const nn::TrainingState state = nn::load_checkpoint(args.resume, *model, *opt);
      nn::restore_rng_state(state);
      first_epoch = state.epoch;
      for (int64_t e = 0; e < first_epoch; ++e) schedule.step();  // the schedule is a function of the epoch
      say("# resumed from %s at epoch %lld%s\n", args.resume.c_str(), static_cast<long long>(first_epoch),
          restored.empty() ? " (the checkpoint records no flags)" : ", with the flags it was trained with");
    }

    const std::string where = dp    ? "DataParallel " + args.dp
                              : ddp ? "DistributedDataParallel, " + std::to_string(world) + " processes"
                                    : device.str();
    say("# ringgrad %s fashion_mnist: MLP 784-%lld-%lld-10, %s lr=%g, batch %lld, %lld epochs, %s\n",
        RINGGRAD_VERSION_STRING, static_cast<long long>(args.hidden), static_cast<long long>(args.hidden),
        args.optimizer.c_str(), args.lr, static_cast<long long>(args.batch_size), static_cast<long long>(args.epochs),
        where.c_str());
    say("#  epoch      loss  train acc   test acc   samples/s   time left\n");

    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    double test_accuracy = 0;
    parallel::DataParallelTimings phase_sum;  // --dp: per-phase time summed over all steps
    int64_t steps = 0;
    examples::Progress progress(stdout, rank == 0, args.progress_s);
    for (int64_t epoch = first_epoch; epoch < args.epochs; ++epoch) {
      const auto epoch_start = clock::now();
      train.set_epoch(epoch);
      double loss_sum = 0;
      int64_t correct = 0, seen = 0, batches = 0;
      nn::data::Batch batch;
      progress.start("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(args.epochs), train.num_batches());
      while (train.next(batch)) {
        const Tensor x = batch.x.to(device), y = batch.y.to(device);
        const Tensor logits = dp ? dp->forward(x) : ddp ? ddp->forward(x) : model->forward(x);
        const Tensor loss = criterion(logits, y);
        opt->zero_grad();
        loss.backward();
        opt->step();
        if (dp) {
          const parallel::DataParallelTimings t = dp->timings();
          phase_sum.scatter_us += t.scatter_us;
          phase_sum.replicate_us += t.replicate_us;
          phase_sum.apply_us += t.apply_us;
          phase_sum.gather_us += t.gather_us;
          phase_sum.backward_us += t.backward_us;
          phase_sum.reduce_us += t.reduce_us;
        }
        ++steps;

        const int64_t n = y.numel();
        loss_sum += loss.item() * static_cast<double>(n);
        const Tensor predicted = argmax(logits.detach(), 1).to(Device::cpu());
        const int64_t* p = predicted.data<int64_t>();
        const int64_t* t = batch.y.data<int64_t>();
        for (int64_t i = 0; i < n; ++i) correct += p[i] == t[i];
        seen += n;
        progress.update(++batches, loss_sum / static_cast<double>(seen));  // this rank's share, under --ddp
      }
      progress.finish();
      schedule.step();
      test_accuracy = evaluate(*model, test, device);
      if (pg) {  // the epoch's statistics over all ranks' shards
        Tensor totals = from_vector<double>({loss_sum, static_cast<double>(correct), static_cast<double>(seen)});
        pg->all_reduce(totals)->wait();
        const std::vector<double> t = totals.to_vector<double>();
        loss_sum = t[0];
        correct = static_cast<int64_t>(t[1]);
        seen = static_cast<int64_t>(t[2]);
      }

      const double seconds = std::chrono::duration<double>(clock::now() - epoch_start).count();
      const double elapsed = std::chrono::duration<double>(clock::now() - start).count();
      const double left =
          elapsed / static_cast<double>(epoch + 1 - first_epoch) * static_cast<double>(args.epochs - epoch - 1);
      say("%8lld  %8.4f   %7.2f%%   %7.2f%%  %10.0f  %8.0f s\n", static_cast<long long>(epoch + 1),
          loss_sum / static_cast<double>(seen), 100.0 * static_cast<double>(correct) / static_cast<double>(seen),
          100.0 * test_accuracy, static_cast<double>(seen) / seconds, left);
      std::fflush(stdout);

      if (!args.save.empty() && rank == 0) {
        nn::TrainingState state;
        state.epoch = epoch + 1;
        state.step = (epoch + 1) * train.num_batches();
        nn::capture_rng_state(state);
        for (const std::string& name : kRunFlags) state.extra[kFlagKey + name] = flags.value(name);
        state.extra["command line"] = flags.canonical();  // for a reader of the file; --resume uses the above
        nn::save_checkpoint(args.save, *model, *opt, state);
      }
      if (epoch + 1 == args.stop_after) {
        say("# stopping after epoch %lld as asked (--stop-after); continue with --resume\n",
            static_cast<long long>(epoch + 1));
        return 0;
      }
    }
    if (first_epoch >= args.epochs) test_accuracy = evaluate(*model, test, device);  // resumed a finished run
    const double total = std::chrono::duration<double>(clock::now() - start).count();
    say("# test accuracy %.2f%% after %lld epochs in %.1f s\n", 100.0 * test_accuracy,
        static_cast<long long>(args.epochs), total);
    if (dp && steps > 0) {
      const double n = static_cast<double>(steps) * 1000.0;  // -> ms per step
      std::printf(
          "# DataParallel ms/step: scatter %.3f  replicate %.3f  apply %.3f  gather %.3f  backward %.3f "
          "(of which reduce %.3f)\n",
          phase_sum.scatter_us / n, phase_sum.replicate_us / n, phase_sum.apply_us / n, phase_sum.gather_us / n,
          phase_sum.backward_us / n, phase_sum.reduce_us / n);
    }
    if (args.target > 0 && test_accuracy < args.target) {
      say("# below the target %.2f%%\n", 100.0 * args.target);
      return 1;
    }
    return 0;
  } catch (const cli::FlagError& e) {  // a bad combination of flags; the message names the program
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 2;
  }
}
