// examples/fashion_mnist.cpp: train an MLP on Fashion-MNIST, the way one would with PyTorch.
//
//   ./build/examples/fashion_mnist --epochs 15 --optimizer sgd --save run.ckpt
//   ./build/examples/fashion_mnist --resume run.ckpt --save run.ckpt   # continue after a crash
//   (--stop-after N ends the first run after N epochs, to try it: the resumed run prints the same
//   numbers, bit for bit, as one that never stopped)
//   ./build/examples/fashion_mnist --dp cpu:0,cpu:1                    # DataParallel on two devices
//   ./build/tools/ringrun --nproc-per-node 2 ./build/examples/fashion_mnist --ddp   # DDP, 2 processes
//
// The model is a user-defined module (nn::Cloneable + reset(), see nn/module.h) so its layers are
// typed members: model->fc1->weight. Each epoch prints loss, accuracy, samples/s and time left;
// the end prints the test accuracy. With --save, a training checkpoint (weights, optimizer state,
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
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace ringgrad;

namespace {

struct Args {
  int64_t epochs = 15;
  int64_t batch_size = 128;
  double lr = -1;  // default depends on the optimizer
  std::string optimizer = "sgd";
  int64_t hidden = 1024;
  std::string device = "cpu:0";
  std::string dp;  // "cpu:0,cpu:1": train with DataParallel over these devices
  bool ddp = false;  // one process per device under ringrun
  uint64_t seed = 0;
  std::string save, resume, data_dir;
  double target = 0;  // minimum test accuracy, 0 = no check
  int64_t stop_after = -1;  // stop after this many epochs, as if the run crashed (to try --resume)
};

void usage() {
  std::printf(
      "usage: fashion_mnist [--epochs N] [--batch-size B] [--lr LR] [--optimizer sgd|adamw] [--hidden H]\n"
      "                     [--device cpu:K] [--seed S] [--save PATH] [--resume PATH] [--data DIR]\n"
      "                     [--target ACC] [--stop-after EPOCHS] [--dp DEV,DEV,...] [--ddp]\n");
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      usage();
      std::exit(0);
    }
    if (flag == "--ddp") {
      a.ddp = true;
      continue;
    }
    RINGGRAD_CHECK(i + 1 < argc, "fashion_mnist: ", flag, " needs a value");
    const std::string value = argv[++i];
    if (flag == "--epochs") a.epochs = std::stoll(value);
    else if (flag == "--batch-size") a.batch_size = std::stoll(value);
    else if (flag == "--lr") a.lr = std::stod(value);
    else if (flag == "--optimizer") a.optimizer = value;
    else if (flag == "--hidden") a.hidden = std::stoll(value);
    else if (flag == "--device") a.device = value;
    else if (flag == "--seed") a.seed = std::stoull(value);
    else if (flag == "--save") a.save = value;
    else if (flag == "--resume") a.resume = value;
    else if (flag == "--data") a.data_dir = value;
    else if (flag == "--target") a.target = std::stod(value);
    else if (flag == "--stop-after") a.stop_after = std::stoll(value);
    else if (flag == "--dp") a.dp = value;
    else throw Error("fashion_mnist: unknown flag " + flag + " (see --help)");
  }
  RINGGRAD_CHECK(a.optimizer == "sgd" || a.optimizer == "adamw", "fashion_mnist: --optimizer is sgd or adamw, got ",
                 a.optimizer);
  if (a.lr < 0) a.lr = a.optimizer == "sgd" ? 0.05 : 1e-3;
  return a;
}

// 784 -> hidden -> hidden -> 10, ReLU fused into the first two GEMMs, dropout between layers.
struct Classifier : nn::Cloneable<Classifier> {
  Classifier(int64_t hidden, double dropout_p) : hidden(hidden), dropout_p(dropout_p) { reset(); }
  void reset() override {
    using nn::LinearOptions;
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(LinearOptions(784, hidden).activation(Activation::Relu)));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(LinearOptions(hidden, hidden).activation(Activation::Relu)));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(hidden, 10));
    drop = register_module("drop", std::make_shared<nn::Dropout>(dropout_p));
  }
  Tensor forward(const Tensor& x) override { return fc3->forward(drop->forward(fc2->forward(drop->forward(fc1->forward(x))))); }
  std::string type_name() const override { return "Classifier"; }

  int64_t hidden;
  double dropout_p;
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
  std::shared_ptr<nn::Dropout> drop;
};

// Fraction of correct predictions over a whole split, in eval mode and without recording a graph.
double evaluate(Classifier& model, data::DataLoader& loader, Device device) {
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0, seen = 0;
  loader.set_epoch(0);
  data::Batch batch;
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
    const Args args = parse(argc, argv);
    const std::vector<Device> dp_devices = args.dp.empty() ? std::vector<Device>{} : parse_devices(args.dp);
    ensure_cpu_devices(dp_devices);
    const Device device = dp_devices.empty() ? Device::parse(args.device) : dp_devices[0];
    RINGGRAD_CHECK(!(args.ddp && !dp_devices.empty()), "fashion_mnist: --dp and --ddp are alternatives, got both");
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
    const data::FashionMNIST train_set(data::Split::Train, args.data_dir);
    const data::FashionMNIST test_set(data::Split::Test, args.data_dir);
    data::DataLoaderOptions train_options =
        data::DataLoaderOptions().batch_size(args.batch_size / world).seed(args.seed).normalize(kMean, kStd);
    if (pg)  // each rank its own shard of every epoch, reshuffled per epoch the same way on every rank
      train_options.sampler(std::make_shared<data::DistributedSampler>(
          train_set.size(), world, rank, data::DistributedSamplerOptions().seed(args.seed)));
    data::DataLoader train(train_set, train_options);
    data::DataLoader test(test_set, data::DataLoaderOptions().batch_size(1000).shuffle(false).normalize(kMean, kStd));

    auto model = std::make_shared<Classifier>(args.hidden, /*dropout_p=*/0.2);
    model->to(device);
    // The wrapper holds the model; dp->module() is `model`, and the optimizer updates its parameters.
    std::unique_ptr<parallel::DataParallel<Classifier>> dp;
    if (!dp_devices.empty()) dp = std::make_unique<parallel::DataParallel<Classifier>>(model, dp_devices);
    // DDP holds the model the same way: ddp->module() is `model`. Construction broadcasts rank 0's weights.
    std::unique_ptr<parallel::DistributedDataParallel<Classifier>> ddp;
    if (pg) ddp = std::make_unique<parallel::DistributedDataParallel<Classifier>>(model, pg);
    std::unique_ptr<optim::Optimizer> opt;
    if (args.optimizer == "sgd")
      opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions(args.lr).momentum(0.9).nesterov(true));
    else
      opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions(args.lr));
    optim::CosineAnnealingLR schedule(*opt, args.epochs);
    nn::CrossEntropyLoss criterion(nn::CrossEntropyLossOptions().label_smoothing(0.1));

    int64_t first_epoch = 0;
    if (!args.resume.empty()) {
      const nn::TrainingState state = nn::load_checkpoint(args.resume, *model, *opt);
      nn::restore_rng_state(state);
      first_epoch = state.epoch;
      for (int64_t e = 0; e < first_epoch; ++e) schedule.step();  // the schedule is a function of the epoch
      say("# resumed from %s at epoch %lld\n", args.resume.c_str(), static_cast<long long>(first_epoch));
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
    for (int64_t epoch = first_epoch; epoch < args.epochs; ++epoch) {
      const auto epoch_start = clock::now();
      train.set_epoch(epoch);
      double loss_sum = 0;
      int64_t correct = 0, seen = 0;
      data::Batch batch;
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
      }
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
      const double left = elapsed / static_cast<double>(epoch + 1 - first_epoch) * static_cast<double>(args.epochs - epoch - 1);
      say("%8lld  %8.4f   %7.2f%%   %7.2f%%  %10.0f  %8.0f s\n", static_cast<long long>(epoch + 1),
          loss_sum / static_cast<double>(seen), 100.0 * static_cast<double>(correct) / static_cast<double>(seen),
          100.0 * test_accuracy, static_cast<double>(seen) / seconds, left);
      std::fflush(stdout);

      if (!args.save.empty() && rank == 0) {
        nn::TrainingState state;
        state.epoch = epoch + 1;
        state.step = (epoch + 1) * train.num_batches();
        nn::capture_rng_state(state);
        nn::save_checkpoint(args.save, *model, *opt, state);
      }
      if (epoch + 1 == args.stop_after) {
        say("# stopping after epoch %lld as asked (--stop-after); continue with --resume\n",
            static_cast<long long>(epoch + 1));
        return 0;
      }
    }
    const double total = std::chrono::duration<double>(clock::now() - start).count();
    say("# test accuracy %.2f%% after %lld epochs in %.1f s\n", 100.0 * test_accuracy,
        static_cast<long long>(args.epochs), total);
    if (dp && steps > 0) {
      const double n = static_cast<double>(steps) * 1000.0;  // -> ms per step
      std::printf("# DataParallel ms/step: scatter %.3f  replicate %.3f  apply %.3f  gather %.3f  backward %.3f "
                  "(of which reduce %.3f)\n",
                  phase_sum.scatter_us / n, phase_sum.replicate_us / n, phase_sum.apply_us / n,
                  phase_sum.gather_us / n, phase_sum.backward_us / n, phase_sum.reduce_us / n);
    }
    if (args.target > 0 && test_accuracy < args.target) {
      say("# below the target %.2f%%\n", 100.0 * args.target);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 2;
  }
}
