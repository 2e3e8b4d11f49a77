/// @file
/// parallel/parallel.h: everything in parallel/: DataParallel and its four building blocks, and
/// process groups (init_process_group, the store).
#pragma once

#include <ringgrad/parallel/comm.h>
#include <ringgrad/parallel/comm_hook.h>
#include <ringgrad/parallel/data_parallel.h>
#include <ringgrad/parallel/distributed_data_parallel.h>
#include <ringgrad/parallel/parallel_apply.h>
#include <ringgrad/parallel/process_group.h>
#include <ringgrad/parallel/replicate.h>

/// @namespace ringgrad::parallel
/// Training on several devices: DataParallel (one process) and DistributedDataParallel (one process
/// per device, over a ProcessGroup), with the collectives, stores and launch helpers under them.
