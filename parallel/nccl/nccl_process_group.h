// parallel/nccl/nccl_process_group.h: ProcessGroup backend "nccl" -- NVIDIA's collectives for GPUs.
//
// Made by init_process_group("nccl"). Its own library, ringgrad::nccl (libringgrad_nccl.a), which
// needs CUDA and NCCL; in a program without it, asking for "nccl" is an error that says how to get
// it. The "ring" backend works everywhere.
#pragma once

#include <chrono>
#include <memory>

#include <ringgrad/parallel/process_group.h>

namespace ringgrad {
namespace parallel {

// One NCCL communicator for this rank on GPU local_rank, its unique id passed through `store`.
// Defined in parallel/process_group.cpp, which every program has: it calls the maker the nccl library
// installed, or throws "not in this build" when the program does not link it.
std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store> store, int rank, int size, int local_rank,
                                                      std::chrono::milliseconds timeout);

// How the nccl library joins a program: from a static initialiser it installs its maker, which also
// registers backend "nccl" with init_process_group.
using NcclGroupMaker = std::shared_ptr<ProcessGroup> (*)(std::shared_ptr<Store> store, int rank, int size,
                                                         int local_rank, std::chrono::milliseconds timeout);
void install_nccl(NcclGroupMaker make);

}  // namespace parallel
}  // namespace ringgrad
