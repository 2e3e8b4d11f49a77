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
// (and, when it takes longer than --progress-every seconds, a progress line meanwhile), then where its
// wall-clock time went: train (the steps), eval (the test set), data (waiting for batches) and other;
// the end prints the test accuracy, the same breakdown for the whole run with its start-up, and the
// mean and median step. --help lists every flag. With --save, a training checkpoint (weights, optimizer state,
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
// The test set is shared out too: each rank evaluates every world-size-th image and the counts are
// summed, so evaluation costs what it costs on one device instead of once per rank. Each process's
// kernels get cores / processes threads (--threads overrides), as torchrun's OMP_NUM_THREADS=1 would.
#include <ringgrad/ringgrad.h>
#include <ringgrad/nn/file_io.h>  // check_writable: --save is checked before training

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

#include "device_list.h"
#include "progress.h"
#include "tools/cli/flags.h"

using namespace ringgrad;
using examples::ensure_cpu_devices;
using examples::parse_devices;

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
  int64_t threads = 0;     // CPU kernel threads per process (per logical device with --dp); 0 = automatic
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
  flags
      .add_int("--threads", &a.threads,
               "CPU threads each process (with --dp: each logical device) may use in its GEMMs; 0: automatic", 0, 1024)
      .default_text("0: all cores; --dp: the cores / the devices; --ddp: the cores / the processes on this machine");
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

// Under --ddp each rank evaluates every R-th test image (rank, rank + R, ...) and the counts are summed
// over the ranks, so the test set is gone through once in all, not once per rank. DistributedSampler
// is not used here: it pads the shares to equal lengths by repeating images, which training needs (every
// rank must run the same number of steps, or a collective waits forever) but a count must not.
class EveryNth final : public nn::data::Sampler {
 public:
  EveryNth(int64_t dataset_size, int world, int rank)
      : first_(rank), stride_(world), size_(rank < dataset_size ? (dataset_size - rank + world - 1) / world : 0) {}
  int64_t size() const override { return size_; }
  std::vector<int64_t> indices(int64_t /*epoch*/) const override {
    std::vector<int64_t> order(static_cast<size_t>(size_));
    for (int64_t i = 0; i < size_; ++i) order[static_cast<size_t>(i)] = first_ + i * stride_;
    return order;
  }

 private:
  int64_t first_, stride_, size_;
};

// Fraction of correct predictions over a whole split, in eval mode and without recording a graph.
// With a process group, `loader` holds this rank's share and the counts are summed over the ranks.
double evaluate(Classifier& model, nn::data::DataLoader& loader, Device device, parallel::ProcessGroup* pg) {
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
  if (pg) {
    Tensor counts = from_vector<double>({static_cast<double>(correct), static_cast<double>(seen)});
    pg->all_reduce(counts)->wait();
    const std::vector<double> c = counts.to_vector<double>();
    return c[0] / c[1];
  }
  return static_cast<double>(correct) / static_cast<double>(seen);
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Where wall-clock time went, in seconds. The loop reads the clock at each boundary, so the parts add
// up to the whole by construction: other = total - start-up - train - eval - data.
struct Times {
  double startup = 0;  // main() to the first epoch: process group, reading the dataset, model, wrappers
  double train = 0;    // the steps: forward, loss, backward, optimizer (DDP: the all-reduce not hidden by backward)
  double eval = 0;     // the test set after each epoch (DDP: this rank's share, then the counts summed)
  double data = 0;     // waiting for the next batch (the loader's gather and normalise) and its copy to the device
  double total = 0;    // all of it; the rest is statistics, the schedule, checkpoints and printing
  double other() const { return total - startup - train - eval - data; }
  std::vector<double> row() const { return {startup, train, eval, data, other(), total}; }
};

// Each part's maximum over the ranks (one all-reduce of six numbers): how long the slowest rank spent in
// it. The maxima may come from different ranks, so they need not add up to the largest total.
std::vector<double> max_over_ranks(const Times& mine, parallel::ProcessGroup& pg) {
  Tensor t = from_vector<double>(mine.row());
  pg.all_reduce(t, parallel::ReduceOp::Max)->wait();
  return t.to_vector<double>();
}

}  // namespace

int main(int argc, char** argv) {
  const Clock::time_point program_start = Clock::now();
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
    // A checkpoint that cannot be written is refused now, not after the first epoch. Only the process
    // that saves checks: rank 0 of a --ddp job (ringrun's RANK), or the only process.
    const char* rank_env = std::getenv("RANK");
    if (!parsed.save.empty() && (!parsed.ddp || rank_env == nullptr || std::string(rank_env) == "0")) {
      try {
        nn::check_writable("--save", parsed.save);
      } catch (const Error& e) {
        flags.fail(e.what());
      }
    }
    const Args args = parsed;
    const std::vector<Device> dp_devices = args.dp.empty() ? std::vector<Device>{} : parse_devices(args.dp);
    ensure_cpu_devices(dp_devices);
    const Device device = dp_devices.empty() ? Device::parse(args.device) : dp_devices[0];
    // --ddp: this process is one rank of a job (RANK, WORLD_SIZE, ... from ringrun).
    std::shared_ptr<parallel::ProcessGroup> pg;
    const Clock::time_point group_start = Clock::now();
    // The threads that this process (--dp: each logical device) gives its GEMMs.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    int threads = args.threads > 0 ? static_cast<int>(args.threads) : cores;
    if (args.ddp) {
      pg = parallel::init_process_group("ring");
      // Processes on one machine share its cores (torchrun sets OMP_NUM_THREADS=1 for the same reason).
      const char* local = std::getenv("LOCAL_WORLD_SIZE");
      const int local_world = local ? std::max(1, std::atoi(local)) : 1;
      if (args.threads == 0) threads = std::max(1, cores / local_world);
      set_num_threads(threads);
    } else if (args.threads > 0) {
      set_num_threads(threads);    // this thread runs the single device's steps
      for (Device d : dp_devices)  // DataParallel's replicas run on the devices' worker threads
        run_on(d, [threads] { set_num_threads(threads); }).get();
    } else if (!dp_devices.empty()) {
      threads = std::max(1, cores / cpu_device_count());  // each device worker's default share (core/device.h)
    }
    const double group_s = seconds_since(group_start);
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
    const Clock::time_point read_start = Clock::now();
    const nn::data::FashionMNIST train_set(nn::data::Split::Train, args.data_dir);
    const nn::data::FashionMNIST test_set(nn::data::Split::Test, args.data_dir);
    const double read_s = seconds_since(read_start);
    nn::data::DataLoaderOptions train_options =
        nn::data::DataLoaderOptions().batch_size(args.batch_size / world).seed(args.seed).normalize(kMean, kStd);
    if (pg)  // each rank its own shard of every epoch, reshuffled per epoch the same way on every rank
      train_options.sampler(std::make_shared<nn::data::DistributedSampler>(
          train_set.size(), world, rank, nn::data::DistributedSamplerOptions().seed(args.seed)));
    nn::data::DataLoader train(train_set, train_options);
    nn::data::DataLoaderOptions test_options =
        nn::data::DataLoaderOptions().batch_size(1000).shuffle(false).normalize(kMean, kStd);
    if (pg) test_options.sampler(std::make_shared<EveryNth>(test_set.size(), world, rank));  // this rank's share
    nn::data::DataLoader test(test_set, test_options);

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
    const char* per = dp ? " per device" : pg ? " per process" : "";
    say("# ringgrad %s fashion_mnist: MLP 784-%lld-%lld-10, %s lr=%g, batch %lld, %lld epochs, %s, %d thread%s%s\n",
        RINGGRAD_VERSION_STRING, static_cast<long long>(args.hidden), static_cast<long long>(args.hidden),
        args.optimizer.c_str(), args.lr, static_cast<long long>(args.batch_size), static_cast<long long>(args.epochs),
        where.c_str(), threads, threads == 1 ? "" : "s", per);
    Times times;
    times.startup = seconds_since(program_start);
    say("# start-up %.2f s: process group %.2f s, reading Fashion-MNIST %.2f s, model and the rest %.2f s\n",
        times.startup, group_s, read_s, times.startup - group_s - read_s);
    say("#  epoch      loss  train acc   test acc   samples/s   time left |   train    eval    data   other   epoch\n");
    say("#%63s |     (s)     (s)     (s)     (s)     (s)%s\n", "", pg ? "  rank 0's" : "");

    const Clock::time_point start = Clock::now();
    double test_accuracy = 0;
    parallel::DataParallelTimings phase_sum;  // --dp: per-phase time summed over all steps
    int64_t steps = 0;
    std::vector<double> step_s;  // every step's time: the median is robust to other programs' bursts
    examples::Progress progress(stdout, rank == 0, args.progress_s);
    for (int64_t epoch = first_epoch; epoch < args.epochs; ++epoch) {
      // This epoch's parts: the clock is read at each boundary between them (see Times).
      const Clock::time_point epoch_start = Clock::now();
      Times epoch_times;
      train.set_epoch(epoch);
      epoch_times.data += seconds_since(epoch_start);
      double loss_sum = 0;
      int64_t correct = 0, seen = 0, batches = 0;
      nn::data::Batch batch;
      progress.start("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(args.epochs), train.num_batches());
      for (;;) {
        Clock::time_point t = Clock::now();
        const bool more = train.next(batch);
        const Tensor x = more ? batch.x.to(device) : Tensor(), y = more ? batch.y.to(device) : Tensor();
        epoch_times.data += seconds_since(t);
        if (!more) break;

        t = Clock::now();
        const Tensor logits = dp ? dp->forward(x) : ddp ? ddp->forward(x) : model->forward(x);
        const Tensor loss = criterion(logits, y);
        opt->zero_grad();
        loss.backward();
        opt->step();
        const double loss_value = loss.item();  // on an asynchronous device (CUDA) this waits for the step
        step_s.push_back(seconds_since(t));
        epoch_times.train += step_s.back();
        if (dp) {
          const parallel::DataParallelTimings dt = dp->timings();
          phase_sum.scatter_us += dt.scatter_us;
          phase_sum.replicate_us += dt.replicate_us;
          phase_sum.apply_us += dt.apply_us;
          phase_sum.gather_us += dt.gather_us;
          phase_sum.backward_us += dt.backward_us;
          phase_sum.reduce_us += dt.reduce_us;
        }
        ++steps;

        const int64_t n = y.numel();
        loss_sum += loss_value * static_cast<double>(n);
        const Tensor predicted = argmax(logits.detach(), 1).to(Device::cpu());
        const int64_t* p = predicted.data<int64_t>();
        const int64_t* labels = batch.y.data<int64_t>();
        for (int64_t i = 0; i < n; ++i) correct += p[i] == labels[i];
        seen += n;
        progress.update(++batches, loss_sum / static_cast<double>(seen));  // this rank's share, under --ddp
      }
      progress.finish();
      schedule.step();
      const Clock::time_point eval_start = Clock::now();
      test_accuracy = evaluate(*model, test, device, pg.get());
      epoch_times.eval = seconds_since(eval_start);
      if (pg) {  // the epoch's statistics over all ranks' shards
        Tensor totals = from_vector<double>({loss_sum, static_cast<double>(correct), static_cast<double>(seen)});
        pg->all_reduce(totals)->wait();
        const std::vector<double> t = totals.to_vector<double>();
        loss_sum = t[0];
        correct = static_cast<int64_t>(t[1]);
        seen = static_cast<int64_t>(t[2]);
      }

      epoch_times.total = seconds_since(epoch_start);
      times.train += epoch_times.train;
      times.eval += epoch_times.eval;
      times.data += epoch_times.data;
      const double elapsed = seconds_since(start);
      const double left =
          elapsed / static_cast<double>(epoch + 1 - first_epoch) * static_cast<double>(args.epochs - epoch - 1);
      say("%8lld  %8.4f   %7.2f%%   %7.2f%%  %10.0f  %8.0f s | %7.2f %7.2f %7.2f %7.2f %7.2f\n",
          static_cast<long long>(epoch + 1), loss_sum / static_cast<double>(seen),
          100.0 * static_cast<double>(correct) / static_cast<double>(seen), 100.0 * test_accuracy,
          static_cast<double>(seen) / epoch_times.total, left, epoch_times.train, epoch_times.eval, epoch_times.data,
          epoch_times.other(), epoch_times.total);
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
    if (first_epoch >= args.epochs) test_accuracy = evaluate(*model, test, device, pg.get());  // a finished run
    say("# test accuracy %.2f%% after %lld epochs in %.1f s\n", 100.0 * test_accuracy,
        static_cast<long long>(args.epochs), seconds_since(start));

    // The whole run, start-up included: these rows add up to the total (the slowest rank's need not).
    times.total = seconds_since(program_start);
    const std::vector<double> slowest = pg ? max_over_ranks(times, *pg) : std::vector<double>{};
    auto time_row = [&say](const char* who, const std::vector<double>& v) {
      say("#   %-16s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", who, v[0], v[1], v[2], v[3], v[4], v[5]);
    };
    say("# time (s)           start-up    train     eval     data    other    total\n");
    time_row(pg ? "rank 0" : "this process", times.row());
    if (pg) time_row("slowest rank", slowest);
    if (steps > 0) {
      std::nth_element(step_s.begin(), step_s.begin() + static_cast<std::ptrdiff_t>(step_s.size() / 2), step_s.end());
      say("# per step: %lld steps of %lld samples (%lld per %s), %.2f ms each (median %.2f ms), %.0f samples/s "
          "while stepping\n",
          static_cast<long long>(steps), static_cast<long long>(args.batch_size),
          static_cast<long long>(args.batch_size / (dp ? static_cast<int64_t>(dp_devices.size()) : world)),
          pg ? "process" : "device", 1000.0 * times.train / static_cast<double>(steps),
          1000.0 * step_s[step_s.size() / 2], static_cast<double>(steps * args.batch_size) / times.train);
    }
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
