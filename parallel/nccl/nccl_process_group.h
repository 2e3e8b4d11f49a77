// parallel/nccl/nccl_process_group.h: ProcessGroup backend "nccl" -- NVIDIA's collectives for GPUs.
//
// Made by init_process_group("nccl"). In a build without NCCL (or without CUDA) asking for it is an
// error that says so; the "ring" backend works everywhere.
#pragma once

#include <chrono>
#include <memory>

#include <ringgrad/parallel/process_group.h>

namespace ringgrad {
namespace parallel {

// One NCCL communicator for this rank on GPU local_rank, its unique id passed through `store`.
std::shared_ptr<ProcessGroup> make_nccl_process_group(std::shared_ptr<Store> store, int rank, int size, int local_rank,
                                                      std::chrono::milliseconds timeout);

}  // namespace parallel
}  // namespace ringgrad
