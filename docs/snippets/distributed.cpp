// docs/snippets/distributed.cpp: how the processes of docs/distributed.md meet -- the launch variables,
// the error without them, and an asynchronous all-reduce. One rank per process: its CTest starts two
// under tools/ringrun (run it alone with RANK=0 WORLD_SIZE=1 for a job of one).
#include <cstdlib>
#include <string>

#include "mlp.h"

using namespace ringgrad;

int main() {
  // Without a launcher's variables, init_process_group says which one is missing and how to launch.
  {
    const char* set = std::getenv("WORLD_SIZE");
    const std::string world_size = set ? set : "";
    unsetenv("WORLD_SIZE");
    std::string message;
    try {
      parallel::init_process_group("ring");
    } catch (const Error& e) {
      message = e.what();
    }
    snippets::expect(message.rfind("init_process_group: WORLD_SIZE is not set; launch with tools/ringrun "
                                   "--nproc-per-node N prog",
                                   0) == 0,
                     "the missing-variable error, got '" + message + "'");
    setenv("WORLD_SIZE", world_size.c_str(), /*overwrite=*/1);
  }

  // [init]
  auto pg = parallel::init_process_group("ring");  // reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
  // [/init]
  snippets::expect(pg->rank() == std::atoi(std::getenv("RANK")) && pg->size() == std::atoi(std::getenv("WORLD_SIZE")),
                   "the group's rank and size are the launcher's");

  // all_reduce returns at once; wait() blocks until the ring is done. Rank r contributes r + 1.
  const int world = pg->size();
  Tensor t = full({1000}, pg->rank() + 1.0);
  std::shared_ptr<parallel::Work> work = pg->all_reduce(t, parallel::ReduceOp::Sum);
  work->wait();
  for (float v : t.to_vector<float>()) snippets::expect(v == world * (world + 1) / 2.0f, "every rank holds the sum");
  std::cout << "distributed: rank " << pg->rank() << " of " << pg->size() << " done\n";
  return 0;
}
