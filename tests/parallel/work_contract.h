// tests/parallel/work_contract.h: what a collective's Work means, checked by the same code on every
// backend -- ring and gloo in tests/parallel/test_work_contract.cpp, nccl on the kernel emulator's
// NCCL stand-in in tests/cuda/test_nccl.cpp:
//
//   - a Work is not complete before every rank has joined its collective, and complete after wait();
//   - the caller may drop its tensor right after the launch: the collective still uses it;
//   - many collectives in flight complete, whatever order they are waited in;
//   - the description names the collective, its size, dtype and device; start <= end;
//   - bad arguments fail at the call, with the same message on every backend;
//   - a collective whose peer never joins fails at the timeout, naming itself and the rank, and
//     every later one fails at once -- its Work has failed, wait() rethrows -- with that first failure.
//
// Two ranks run as two threads of this process, meeting through a TCPStore on a free port.
#pragma once

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ringgrad/core/base/error.h>
#include <ringgrad/core/tensor.h>
#include <ringgrad/parallel/process_group.h>
#include <ringgrad/parallel/store.h>

namespace ringgrad {
namespace test {

struct ContractBackend {
  std::string prefix;  // what starts the backend's messages: "gloo " or ""
  // Rank `rank` of a group of `size` meeting through `store` (null for a group of one).
  std::function<std::shared_ptr<parallel::ProcessGroup>(const std::shared_ptr<parallel::Store>& store, int rank,
                                                        int size, std::chrono::milliseconds timeout)>
      make;
  std::function<Device(int rank)> device;  // where rank `rank`'s tensors live
};

// Runs body(rank, group) for ranks 0 and 1 on two threads; returns what each threw ("" when nothing).
// The groups are made with a 60 s timeout (setup included); a body that wants a shorter one for its
// collectives sets it once the group is up.
template <typename Body>
std::vector<std::string> on_two_ranks(const ContractBackend& b, Body body) {
  auto server = std::make_shared<parallel::TCPStore>(
      parallel::TCPStoreOptions().host("127.0.0.1").port(0).is_server(true).timeout(std::chrono::seconds(60)));
  auto client = std::make_shared<parallel::TCPStore>(
      parallel::TCPStoreOptions().host("127.0.0.1").port(server->port()).timeout(std::chrono::seconds(60)));
  const std::vector<std::shared_ptr<parallel::Store>> stores = {server, client};
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto pg = b.make(stores[static_cast<size_t>(rank)], rank, 2, std::chrono::seconds(60));
        body(rank, pg);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Every element of `t` equal to `want`; throws naming `what` otherwise (Catch2's CHECK is not for
// other threads).
inline void expect_all(const Tensor& t, double want, const std::string& what) {
  const std::vector<double> got = t.to(Device::cpu()).to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i)
    RINGGRAD_CHECK(got[i] == want, what, ": element ", i, " is ", got[i], ", expected ", want);
}

inline void check_completion_contract(const ContractBackend& b) {
  std::promise<void> rank0_waiting;
  std::shared_future<void> rank0_ready = rank0_waiting.get_future().share();
  std::atomic<bool> complete_too_early{false};
  const auto errors = on_two_ranks(b, [&](int rank, std::shared_ptr<parallel::ProcessGroup> pg) {
    const Device dev = b.device(rank);
    if (rank == 0) {
      std::shared_ptr<parallel::Work> w;
      {
        const Tensor dropped = full({1000}, 1.0).to(dev);
        w = pg->all_reduce(dropped);  // the caller's handle is gone at once: the Work keeps the tensor
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      complete_too_early = w->is_completed();  // rank 1 has not launched its side yet
      rank0_waiting.set_value();
      w->wait();
      RINGGRAD_CHECK(w->is_completed(), "is_completed() is false after wait()");
      RINGGRAD_CHECK(w->start_time() <= w->end_time(), "the Work ended before it started");
    } else {
      RINGGRAD_CHECK(rank0_ready.wait_for(std::chrono::seconds(60)) == std::future_status::ready,
                     "rank 0 never launched its side");
      const Tensor mine = full({1000}, 2.0).to(dev);
      pg->all_reduce(mine)->wait();
      expect_all(mine, 3.0, "rank 1's sum with rank 0's dropped tensor");
    }
    // Eight in flight, waited for last to first.
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<parallel::Work>> works;
    for (int k = 0; k < 8; ++k) {
      tensors.push_back(full({257}, static_cast<double>(k + rank)).to(dev));
      works.push_back(pg->all_reduce(tensors.back()));
    }
    for (int k = 7; k >= 0; --k) {
      works[static_cast<size_t>(k)]->wait();
      expect_all(tensors[static_cast<size_t>(k)], 2.0 * k + 1, "all_reduce " + std::to_string(k) + " of 8");
    }
    const std::string want = "all_reduce(sum, 257 x float32 on " + detail::str(dev) + ")";
    RINGGRAD_CHECK(works[0]->description() == want, "description '", works[0]->description(), "', expected '", want,
                   "'");
  });
  INFO("rank 0: " << errors[0] << "\nrank 1: " << errors[1]);
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
  CHECK_FALSE(complete_too_early.load());
}

// The message of the Error that `call` throws; "" when it throws none.
template <typename Call>
std::string error_of(Call call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline void check_argument_contract(const ContractBackend& b) {
  const auto pg = b.make(nullptr, 0, 1, std::chrono::seconds(60));
  const Device dev = b.device(0);
  const std::string p = b.prefix, on = " on " + detail::str(dev);
  CHECK(error_of([&] { pg->all_reduce(Tensor()); }) ==
        p + "all_reduce: expected a defined tensor for the tensor, got an undefined one");
  CHECK(error_of([&] { pg->all_reduce(zeros({4}, DType::i64).to(dev)); }) ==
        p + "all_reduce: expected float32, float64, bfloat16 or float16 for the tensor, got int64");
  CHECK(error_of([&] {
          pg->all_reduce(zeros({4, 6}).to(dev).t());
        }) == p + "all_reduce: expected a contiguous tensor for the tensor, got shape [6, 4] with strides [1, 6]; pass "
                  "t.contiguous() and copy the result back");
  CHECK(error_of([&] { pg->broadcast(zeros({3}).to(dev), 1); }) ==
        p + "broadcast: expected a root rank in 0..0, got 1");
  CHECK(error_of([&] {
          pg->all_gather({zeros({3}).to(dev), zeros({3}).to(dev)}, zeros({3}).to(dev));
        }) == p + "all_gather: expected 1 output tensors (one per rank), got 2");
  CHECK(error_of([&] { pg->all_gather({zeros({4}).to(dev)}, zeros({3}).to(dev)); }) ==
        p + "all_gather: expected output 0 to be [3] float32" + on + " like the input, got [4] float32" + on);
  CHECK(error_of([&] { pg->reduce_scatter(zeros({3}).to(dev), {zeros({3}, DType::f64).to(dev)}); }) ==
        p + "reduce_scatter: expected input 0 to be [3] float32" + on + " like the output, got [3] float64" + on);
  CHECK(error_of([&] { pg->reduce_scatter(zeros({3}, DType::u8).to(dev), {zeros({3}, DType::u8).to(dev)}); }) ==
        p + "reduce_scatter: expected float32, float64, bfloat16 or float16 for the output, got uint8");
}

inline void check_failure_contract(const ContractBackend& b) {
  constexpr std::chrono::milliseconds kTimeout{1500};
  std::promise<void> rank0_done;
  std::shared_future<void> rank0_finished = rank0_done.get_future().share();
  std::string first, later;
  double first_ms = -1, later_ms = -1;
  const auto errors = on_two_ranks(b, [&](int rank, std::shared_ptr<parallel::ProcessGroup> pg) {
    const Device dev = b.device(rank);
    const Tensor t = full({5}, 1.0).to(dev);
    pg->all_reduce(t)->wait();  // both ranks: connected, with the 60 s timeout
    pg->set_timeout(kTimeout);
    if (rank == 1) {
      rank0_finished.wait_for(std::chrono::seconds(60));  // silent, but alive, until rank 0 gave up
      return;
    }
    auto start = std::chrono::steady_clock::now();
    first = error_of([&] { pg->all_reduce(t)->wait(); });
    first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    start = std::chrono::steady_clock::now();
    std::shared_ptr<parallel::Work> after;
    later = error_of([&] {
      after = pg->barrier();  // launching does not throw: the Work has failed
      after->wait();
    });
    later_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    RINGGRAD_CHECK(after != nullptr && after->is_completed(), "the later collective's Work is not complete");
    rank0_done.set_value();
  });
  INFO("rank 0: " << errors[0] << "\nrank 1: " << errors[1] << "\nfirst: " << first << "\nlater: " << later);
  CHECK(errors[0].empty());
  CHECK(errors[1].empty());
  const std::string failed = b.prefix + "all_reduce(sum, 5 x float32 on " + detail::str(b.device(0)) + ") on rank 0";
  CHECK_THAT(first, Catch::StartsWith(failed));
  CHECK(first_ms >= 0.9 * kTimeout.count());
  CHECK(first_ms < kTimeout.count() + 5000);
  CHECK_THAT(later, Catch::StartsWith(b.prefix +
                                      "barrier() on rank 0: the process group is broken by an earlier "
                                      "failure: " +
                                      failed));
  CHECK(later_ms < 1000);
}

inline void check_work_contract(const ContractBackend& b) {
  SECTION("completion, keep-alive, many in flight, descriptions") { check_completion_contract(b); }
  SECTION("bad arguments fail at the call with the same message") { check_argument_contract(b); }
  SECTION("a collective whose peer never joins times out; later ones fail at once") { check_failure_contract(b); }
}

}  // namespace test
}  // namespace ringgrad
