// tests/cuda/test_nccl.cpp: ProcessGroup backend "nccl" on real GPUs.
//
// Most tests use a group of one on cuda:0, through init_process_group("nccl") as a user would: NCCL
// refuses two ranks on one GPU, so that is all a one-GPU machine can run. A group of one still goes
// through everything ringgrad does -- the unique id, the non-blocking communicator, the NCCL stream
// and its events, the Work, scratch buffers and copies -- and the results must equal each rank's
// own values. What a group of one cannot show (sums over ranks, a peer that never comes) is checked
// by the two tests named "needs 2 GPUs", which run two ranks as two threads on cuda:0 and cuda:1.
//
// Label `cuda`: these tests FAIL without a GPU (a skipped GPU test reads as a passed one), and so
// do the "needs 2 GPUs" tests on a machine with one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ringgrad/core/ops.h>
#include <ringgrad/core/tensor.h>
#include "cuda_test_util.h"
#include "parallel/nccl/nccl_process_group.h"
#include <ringgrad/parallel/process_group.h>
#include <ringgrad/parallel/store.h>
#include "parallel/work_contract.h"
#include "test_util.h"

using namespace ringgrad;
using RedOp = parallel::ReduceOp;  // ringgrad::ReduceOp is the kernels' (sum/max over a dim)
using ringgrad::test::MessageContainsAll;

namespace {

// A GPU, and a build with NCCL: without either these tests fail, saying which is missing.
void require_nccl_gpu() {
  test::require_gpu();
  if (!parallel::nccl_available())
    FAIL("this build has no NCCL backend (configure found no nccl.h / libnccl); the nccl tests need it");
}

std::shared_ptr<parallel::ProcessGroup> group_of_one() {
  parallel::InitOptions options = parallel::InitOptions().rank(0).world_size(1).timeout(std::chrono::seconds(60));
  options.local_rank() = 0;  // not LOCAL_RANK from the environment
  return parallel::init_process_group("nccl", options);
}

// Rank r's value at element i: small integers, so sums are exact in every dtype and order.
double value(int r, int64_t i) { return static_cast<double>((i * 7 + r * 13) % 31) - 8.0; }

Tensor rank_values(int r, int64_t n, DType dt, int device) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(r, i);
  return from_vector(v, Shape{n}).to(Device::cuda(device)).to(dt);
}

// Every element equal (these values are exact); names the first that is not.
void check_equal(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  const std::vector<double> g = got.to_vector<double>();
  REQUIRE(g.size() == want.size());
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(g[i] == want[i]) && wrong++ == 0) first = i;
  INFO(what << ": " << wrong << " of " << g.size() << " wrong; first at " << first << ": got "
            << (g.empty() ? 0.0 : g[first]) << ", want " << (want.empty() ? 0.0 : want[first]));
  CHECK(wrong == 0);
}

// scale * value(r, i) + shift for every i < n.
std::vector<double> values_of(int r, int64_t n, double scale = 1.0, double shift = 0.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = scale * value(r, i) + shift;
  return v;
}

}  // namespace

// --- a group of one on cuda:0 ------------------------------------------------------------------------------

TEST_CASE("nccl: a group of one on cuda:0 starts through init_process_group and becomes the default", "[nccl][cuda]") {
  require_nccl_gpu();
  auto pg = group_of_one();
  CHECK(std::string(pg->backend_name()) == "nccl");
  CHECK(pg->rank() == 0);
  CHECK(pg->size() == 1);
  CHECK(parallel::default_process_group() == pg);
  parallel::destroy_process_group();
}

TEST_CASE("nccl: all_reduce sum, avg, min and max leave a lone rank's values, in every floating dtype",
          "[nccl][cuda]") {
  require_nccl_gpu();
  auto pg = group_of_one();  // one communicator for every case: creating one takes a while
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Min, RedOp::Max}) {
      for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{(1 << 20) + 3}}) {
        INFO(dtype_name(dt) << " " << parallel::reduce_op_name(op) << " n=" << n);
        Tensor t = rank_values(0, n, dt, 0);
        auto work = pg->all_reduce(t, op);
        work->wait();
        CHECK(work->is_completed());
        CHECK(work->description().find(parallel::reduce_op_name(op)) != std::string::npos);
        check_equal(t, values_of(0, n), "all_reduce");
      }
    }
  }
  parallel::destroy_process_group();
}

TEST_CASE("nccl: broadcast from root 0 moves any dtype, bytes as they are", "[nccl][cuda]") {
  require_nccl_gpu();
  auto pg = group_of_one();
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::u8}) {
    INFO(dtype_name(dt));
    Tensor t = (rank_values(0, 777, DType::f32, 0) + 8.0).to(dt);  // 0..30: fits uint8
    pg->broadcast(t, 0)->wait();
    check_equal(t, values_of(0, 777, 1.0, 8.0), "broadcast");
    CHECK_THROWS_MATCHES(pg->broadcast(t, 1), Error, MessageContainsAll({"broadcast", "root rank in 0..0", "got 1"}));
  }
  parallel::destroy_process_group();
}

TEST_CASE("nccl: all_gather fills its one output with the input, for any dtype and shape", "[nccl][cuda]") {
  require_nccl_gpu();
  auto pg = group_of_one();
  for (DType dt : {DType::f32, DType::f64, DType::i64}) {
    INFO(dtype_name(dt));
    const Tensor input = rank_values(0, 5 * 37, DType::f32, 0).to(dt).view({5, 37});
    std::vector<Tensor> outputs = {test::poisoned({5, 37}, dt)};
    pg->all_gather(outputs, input)->wait();
    check_equal(outputs[0], values_of(0, 5 * 37), "all_gather output 0");
  }
  parallel::destroy_process_group();
}

TEST_CASE("nccl: reduce_scatter of a lone rank writes its input into the output and leaves the input alone",
          "[nccl][cuda]") {
  require_nccl_gpu();
  auto pg = group_of_one();
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Min, RedOp::Max}) {
      INFO(dtype_name(dt) << " " << parallel::reduce_op_name(op));
      const Tensor input = rank_values(0, 4097, dt, 0);
      Tensor output = test::poisoned({4097}, dt);
      pg->reduce_scatter(output, {input}, op)->wait();
      check_equal(output, values_of(0, 4097), "reduce_scatter output");
      check_equal(input, values_of(0, 4097), "reduce_scatter input");
    }
  }
  parallel::destroy_process_group();
}

TEST_CASE("nccl: barrier and collectives over empty tensors complete", "[nccl][cuda]") {
  require_nccl_gpu();
  auto pg = group_of_one();
  auto barrier = pg->barrier();
  barrier->wait();
  CHECK(barrier->is_completed());
  const Tensor empty_tensor = zeros({0}, TensorOptions(DType::f32).device(Device::cuda(0)));
  auto work = pg->all_reduce(empty_tensor);
  CHECK(work->is_completed());
  work->wait();
  parallel::destroy_process_group();
}

TEST_CASE("nccl: a Work completes by itself, without wait", "[nccl][cuda]") {
  require_nccl_gpu();
  auto pg = group_of_one();
  Tensor t = rank_values(0, 1 << 16, DType::f32, 0);
  auto work = pg->all_reduce(t);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!work->is_completed() && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(work->is_completed());
  work->wait();  // returns at once, without an error
  parallel::destroy_process_group();
}

TEST_CASE("nccl: kernels queued after wait() see the result, with no host synchronisation in between", "[nccl][cuda]") {
  require_nccl_gpu();
  auto pg = group_of_one();
  // 16M floats: long enough that a missing stream dependency would let `* 2` read the poison.
  const int64_t n = int64_t{1} << 24;
  const Tensor base = rank_values(0, n, DType::f32, 0);
  for (int round = 0; round < 3; ++round) {
    // The input is written by a kernel just before the launch: NCCL must read it after that kernel.
    const Tensor input = base * 3.0;
    Tensor output = test::poisoned({n}, DType::f32);
    auto work = pg->reduce_scatter(output, {input});
    work->wait();
    check_equal(output * 2.0, values_of(0, n, 6.0), "reduce_scatter, wait, then * 2");

    // all_gather copies out of its scratch buffer after the collective: those copies are done too.
    std::vector<Tensor> gathered = {test::poisoned({n}, DType::f32)};
    pg->all_gather(gathered, input)->wait();
    check_equal(gathered[0] * 2.0, values_of(0, n, 6.0), "all_gather, wait, then * 2");
  }
  parallel::destroy_process_group();
}

TEST_CASE("nccl: tensors may be dropped right after the launch: the Work keeps what the GPU still uses",
          "[nccl][cuda]") {
  require_nccl_gpu();
  auto pg = group_of_one();
  const int64_t n = int64_t{1} << 22;
  Tensor output = test::poisoned({n}, DType::f32);
  std::shared_ptr<parallel::Work> work;
  {
    const Tensor input = rank_values(0, n, DType::f32, 0);
    work = pg->reduce_scatter(output, {input});
  }
  // The freed blocks go back to the caching allocator; these allocations reuse them and overwrite them.
  const Tensor junk1 = full({n}, 999.0, TensorOptions(DType::f32).device(Device::cuda(0)));
  const Tensor junk2 = full({n}, 999.0, TensorOptions(DType::f32).device(Device::cuda(0)));
  work->wait();
  check_equal(output, values_of(0, n), "reduce_scatter with its input dropped");
  parallel::destroy_process_group();
}

TEST_CASE("nccl: many collectives in flight at once complete in any order of waiting", "[nccl][cuda]") {
  require_nccl_gpu();
  auto pg = group_of_one();
  std::vector<Tensor> buckets;
  std::vector<std::shared_ptr<parallel::Work>> works;
  for (int b = 0; b < 24; ++b) {
    buckets.push_back(rank_values(0, 1000 + 977 * b, DType::f32, 0));
    works.push_back(pg->all_reduce(buckets.back(), RedOp::Avg));
  }
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (int b = 0; b < 24; ++b) check_equal(buckets[b], values_of(0, 1000 + 977 * b), "bucket " + std::to_string(b));
  parallel::destroy_process_group();
}

TEST_CASE("nccl: destroying the group waits for a collective in flight", "[nccl][cuda]") {
  require_nccl_gpu();
  auto pg = group_of_one();
  Tensor t = rank_values(0, 1 << 22, DType::f32, 0);
  auto work = pg->all_reduce(t, RedOp::Max);
  parallel::destroy_process_group();
  pg.reset();  // the last handle: the destructor runs here
  CHECK(work->is_completed());
  work->wait();
  check_equal(t, values_of(0, 1 << 22), "all_reduce across the group's destruction");
}

TEST_CASE("nccl: wrong tensors are refused on the caller with what was expected and what was got", "[nccl][cuda]") {
  require_nccl_gpu();
  auto pg = group_of_one();
  const Tensor on_cpu = zeros({8});
  CHECK_THROWS_MATCHES(
      pg->all_reduce(on_cpu), Error,
      MessageContainsAll({"all_reduce", "cuda:0", "got cpu:0", "LOCAL_RANK 0", ".to(Device::cuda(0))"}));
  CHECK_THROWS_MATCHES(pg->broadcast(on_cpu, 0), Error, MessageContainsAll({"broadcast", "got cpu:0"}));
  const Tensor matrix = zeros({4, 6}, TensorOptions(DType::f32).device(Device::cuda(0)));
  CHECK_THROWS_MATCHES(pg->all_reduce(matrix.t()), Error, MessageContainsAll({"all_reduce", "contiguous", "[6, 4]"}));
  const Tensor labels = zeros({8}, TensorOptions(DType::i64).device(Device::cuda(0)));
  CHECK_THROWS_MATCHES(pg->all_reduce(labels), Error,
                       MessageContainsAll({"all_reduce", "float32, float64, bfloat16 or float16", "int64"}));
  const Tensor x = zeros({8}, TensorOptions(DType::f32).device(Device::cuda(0)));
  CHECK_THROWS_MATCHES(pg->all_gather({x, x}, x), Error,
                       MessageContainsAll({"all_gather", "expected 1 output tensors", "got 2"}));
  CHECK_THROWS_MATCHES(pg->all_gather({zeros({9}, TensorOptions(DType::f32).device(Device::cuda(0)))}, x), Error,
                       MessageContainsAll({"all_gather", "output 0", "[8]", "[9]"}));
  CHECK_THROWS_MATCHES(pg->reduce_scatter(x, {on_cpu}), Error,
                       MessageContainsAll({"reduce_scatter", "input 0", "cpu:0"}));
  // Refused on the caller: the group is still good.
  pg->all_reduce(x)->wait();
  parallel::destroy_process_group();
}

// --- two ranks, one thread each, on cuda:0 and cuda:1 ------------------------------------------------------
namespace {

// Rank r of a group of the nccl backend on cuda:r, as the Work contract (work_contract.h) makes them.
test::ContractBackend nccl_backend() {
  test::ContractBackend nccl;
  nccl.make = [](const std::shared_ptr<parallel::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
    return parallel::make_nccl_process_group(store, rank, size, rank, timeout);
  };
  nccl.device = [](int rank) { return Device::cuda(rank); };
  return nccl;
}

// Runs `body(rank, group)` for ranks 0 and 1 on threads, each rank on its own GPU, meeting through
// a TCPStore on a free port; returns what each rank threw ("" when nothing).
template <typename Body>
std::vector<std::string> run_two_ranks(Body body) {
  return test::on_two_ranks(nccl_backend(), body);
}

double reduced(RedOp op, int64_t i) {
  const double a = value(0, i), b = value(1, i);
  switch (op) {
    case RedOp::Sum: return a + b;
    case RedOp::Avg: return (a + b) / 2;  // halves are exact in every dtype used here
    case RedOp::Min: return std::min(a, b);
    case RedOp::Max: return std::max(a, b);
  }
  return 0;
}

}  // namespace

TEST_CASE("nccl: a tensor on another GPU than the group's is refused", "[nccl][cuda][multi-gpu]") {
  require_nccl_gpu();
  test::require_gpus(2);
  auto pg = group_of_one();
  const Tensor on_cuda1 = zeros({8}, TensorOptions(DType::f32).device(Device::cuda(1)));
  CHECK_THROWS_MATCHES(pg->all_reduce(on_cuda1), Error, MessageContainsAll({"all_reduce", "cuda:0", "got cuda:1"}));
}

// NCCL refuses two ranks on one GPU: these take two.
TEST_CASE("nccl: two ranks reduce, broadcast, gather and scatter exactly", "[nccl][cuda][multi-gpu]") {
  require_nccl_gpu();
  test::require_gpus(2);
  const int64_t n = 100003;  // odd: blocks of unequal size for NCCL's channels
  const auto errors = run_two_ranks([&](int rank, const std::shared_ptr<parallel::ProcessGroup>& pg) {
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::Min, RedOp::Max}) {
        Tensor t = rank_values(rank, n, dt, rank);
        pg->all_reduce(t, op)->wait();
        std::vector<double> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = reduced(op, i);
        const std::vector<double> got = t.to_vector<double>();
        for (int64_t i = 0; i < n; ++i)
          RINGGRAD_CHECK(got[i] == want[i], "all_reduce ", parallel::reduce_op_name(op), " ", dt, " on rank ", rank,
                         ": element ", i, " is ", got[i], ", expected ", want[i]);
      }
    }
    Tensor b = rank_values(rank, n, DType::i64, rank);
    pg->broadcast(b, 1)->wait();
    RINGGRAD_CHECK(b.to_vector<double>() == values_of(1, n), "broadcast from rank 1 differs on rank ", rank);

    const Tensor input = rank_values(rank, n, DType::f32, rank);
    std::vector<Tensor> outputs = {test::poisoned({n}, DType::f32).to(Device::cuda(rank)),
                                   test::poisoned({n}, DType::f32).to(Device::cuda(rank))};
    pg->all_gather(outputs, input)->wait();
    for (int r = 0; r < 2; ++r)
      RINGGRAD_CHECK(outputs[r].to_vector<double>() == values_of(r, n), "all_gather output ", r, " differs on rank ",
                     rank);

    // reduce_scatter: input block r of rank q holds value(q, i) + r, so block `rank` sums to
    // value(0, i) + value(1, i) + 2 * rank.
    std::vector<Tensor> inputs = {rank_values(rank, n, DType::f32, rank), rank_values(rank, n, DType::f32, rank) + 1.0};
    Tensor output = test::poisoned({n}, DType::f32).to(Device::cuda(rank));
    pg->reduce_scatter(output, inputs, RedOp::Sum)->wait();
    const std::vector<double> got = output.to_vector<double>();
    for (int64_t i = 0; i < n; ++i)
      RINGGRAD_CHECK(got[i] == value(0, i) + value(1, i) + 2.0 * rank, "reduce_scatter on rank ", rank, ": element ", i,
                     " is ", got[i]);
    pg->barrier()->wait();
  });
  INFO("rank 0: " << errors[0] << "\nrank 1: " << errors[1]);
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
}

// What DDP's buckets are for: while one bucket's all-reduce waits for a slower rank, the rest of
// backward goes on. Rank 1 joins the collective only after rank 0 has queued and finished more
// compute; if the compute stream waited for the collective (as it did at launch), rank 0's compute
// would wait for rank 1, which waits for rank 0: a hang until the 10 s below.
TEST_CASE("nccl: compute queued after a launch runs while a peer holds the collective back",
          "[nccl][cuda][multi-gpu]") {
  require_nccl_gpu();
  test::require_gpus(2);
  std::promise<void> computed;
  std::shared_future<void> rank0_computed = computed.get_future().share();
  double compute_ms = -1;
  const auto errors = run_two_ranks([&](int rank, const std::shared_ptr<parallel::ProcessGroup>& pg) {
    Tensor bucket = rank_values(rank, 1 << 16, DType::f32, rank);
    pg->all_reduce(bucket)->wait();  // both ranks connected
    if (rank == 1) {
      rank0_computed.wait_for(std::chrono::seconds(10));  // holds its part back
      pg->all_reduce(bucket)->wait();
      return;
    }
    auto work = pg->all_reduce(bucket);  // cannot finish before rank 1 joins
    const auto start = std::chrono::steady_clock::now();
    const Tensor x = rank_values(0, 4096, DType::f32, 0);
    const std::vector<double> y = (x * 2.0 + 1.0).to_vector<double>();  // more compute, read on the host
    compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    RINGGRAD_CHECK(y[5] == 2.0 * value(0, 5) + 1.0, "the compute queued after the launch is wrong: ", y[5]);
    computed.set_value();
    work->wait();
    // The result arrived too: the sum of both ranks' first all-reduce results, twice.
    const std::vector<double> got = bucket.to_vector<double>();
    RINGGRAD_CHECK(got[7] == 2.0 * (value(0, 7) + value(1, 7)), "all_reduce after the hold: ", got[7]);
  });
  INFO("rank 0: " << errors[0] << "\nrank 1: " << errors[1]);
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
  INFO("compute queued after the launch took " << compute_ms << " ms");
  CHECK(compute_ms >= 0);
  CHECK(compute_ms < 5000);
}

TEST_CASE("nccl: a rank that never joins makes the other time out, abort, and stay broken", "[nccl][cuda][multi-gpu]") {
  require_nccl_gpu();
  test::require_gpus(2);
  std::promise<void> rank0_done;
  std::shared_future<void> rank0_finished = rank0_done.get_future().share();
  std::string first_error, second_error;
  double second_ms = -1;
  const auto errors = run_two_ranks([&](int rank, const std::shared_ptr<parallel::ProcessGroup>& pg) {
    Tensor t = rank_values(rank, 1 << 20, DType::f32, rank);
    pg->all_reduce(t)->wait();  // both ranks: the connection is up
    if (rank == 1) {
      // Stay alive, and silent, until rank 0 gave up (bounded, should rank 0 fail earlier).
      rank0_finished.wait_for(std::chrono::seconds(60));
      return;
    }
    pg->set_timeout(std::chrono::milliseconds(3000));
    std::shared_ptr<parallel::Work> stuck;
    {
      const Tensor dropped = rank_values(rank, 1 << 20, DType::f32, rank);
      stuck = pg->all_reduce(dropped);  // the Work keeps its tensor; the caller drops it at once
    }
    try {
      stuck->wait();
    } catch (const Error& e) {
      first_error = e.what();
    }
    // The aborted collective's block goes back to the compute stream's pool, where the next tensor of
    // its size gets it: only once the NCCL stream has drained, or an aborted kernel could still write
    // it (on the emulator, the happens-before checker stops the program if nothing orders the two).
    const Tensor next = t * 2.0;
    check_equal(next, (t.to(Device::cpu()) * 2.0).to_vector<double>(), "the tensor after the abort");
    const auto start = std::chrono::steady_clock::now();
    try {
      pg->all_reduce(t)->wait();
    } catch (const Error& e) {
      second_error = e.what();
    }
    second_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    rank0_done.set_value();
  });
  INFO("rank 0: " << errors[0] << "\nrank 1: " << errors[1] << "\nfirst: " << first_error
                  << "\nsecond: " << second_error);
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
  CHECK_THAT(first_error, Catch::Contains("all_reduce(sum, 1048576 x float32 on cuda:0) on rank 0") &&
                              Catch::Contains("timed out after 3000 ms") && Catch::Contains("communicator aborted"));
  CHECK_THAT(second_error,
             Catch::Contains("broken by an earlier failure") && Catch::Contains("timed out after 3000 ms"));
  CHECK(second_ms >= 0);
  CHECK(second_ms < 100);  // at once, not after another timeout
}

// The Work contract every backend meets (tests/parallel/work_contract.h), as the ring's and gloo's
// tests run it: rank r on cuda:r.
TEST_CASE("nccl: the Work contract every backend meets", "[nccl][cuda][multi-gpu]") {
  require_nccl_gpu();
  test::require_gpus(2);
  test::check_work_contract(nccl_backend());
}

#ifdef RINGGRAD_CUDA_EMU
// Only the emulator's stand-in can make a collective take its time to enqueue
// (RINGGRAD_EMU_NCCL_SLOW_ENQUEUE): a real NCCL answers ncclInProgress while it connects lazily, which
// no test can arrange. The launch that waits for it holds the group's mutex, so the watchdog cannot
// poll meanwhile: the launch polls the collectives in flight itself.
TEST_CASE("nccl: a collective past its deadline fails on time while a later launch waits for NCCL to enqueue",
          "[nccl][cuda][multi-gpu]") {
  require_nccl_gpu();
  test::require_gpus(2);
  ::setenv("RINGGRAD_EMU_NCCL_SLOW_ENQUEUE", "3:10000", 1);  // each rank's third collective: 10 s
  std::promise<void> rank0_done;
  std::shared_future<void> rank0_finished = rank0_done.get_future().share();
  std::string error;
  double error_ms = -1;
  const auto errors = run_two_ranks([&](int rank, const std::shared_ptr<parallel::ProcessGroup>& pg) {
    Tensor t = rank_values(rank, 1024, DType::f32, rank);
    pg->all_reduce(t)->wait();  // both ranks: the connection is up
    if (rank == 1) {
      rank0_finished.wait_for(std::chrono::seconds(30));  // never joins the second
      return;
    }
    pg->set_timeout(std::chrono::milliseconds(2000));
    const auto start = std::chrono::steady_clock::now();
    auto stuck = pg->all_reduce(t);  // its deadline: 2 s from now
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    try {
      pg->all_reduce(t)->wait();  // enqueues for 10 s; its own deadline would be 3 s from the start
    } catch (const Error& e) {
      error = e.what();
    }
    error_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    rank0_done.set_value();
  });
  ::unsetenv("RINGGRAD_EMU_NCCL_SLOW_ENQUEUE");
  INFO("rank 0: " << errors[0] << "\nrank 1: " << errors[1] << "\nthe second launch: " << error);
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
  CHECK_THAT(error, Catch::Contains("all_reduce(sum, 1024 x float32 on cuda:0) on rank 0") &&
                        Catch::Contains("timed out after 2000 ms") && Catch::Contains("communicator aborted"));
  INFO("the second launch failed after " << error_ms << " ms");
  CHECK(error_ms >= 1900);
  CHECK(error_ms < 2700);  // the first collective's deadline, not the second's (3000 ms)
}
#endif
