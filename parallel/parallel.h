// parallel/parallel.h: everything in parallel/ (DataParallel and its four building blocks).
#pragma once

#include "parallel/comm.h"
#include "parallel/data_parallel.h"
#include "parallel/parallel_apply.h"
#include "parallel/replicate.h"
