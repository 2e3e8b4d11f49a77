// parallel/parallel.h: everything in parallel/: DataParallel and its four building blocks, and
// process groups (init_process_group, the store).
#pragma once

#include "parallel/comm.h"
#include "parallel/data_parallel.h"
#include "parallel/distributed_data_parallel.h"
#include "parallel/parallel_apply.h"
#include "parallel/process_group.h"
#include "parallel/replicate.h"
