// tools/launch/job_environment.h: the variables every rank of a job shares (launcher.h lists them),
// and the two values the launcher may have to make up: a free port and a job token.
#pragma once

#include <string>
#include <vector>

#include "tools/launch/launcher.h"

namespace ringgrad::launch {

// This process's environment without the variables the launcher sets, then those shared by every
// rank (all but RANK and LOCAL_RANK), then options.extra_env. Picks the port when master_port is 0.
std::vector<std::string> shared_environment(const JobOptions& options);

// Binds port 0 on `addr`, asks the kernel which port it chose, and lets it go.
int pick_free_port(const std::string& addr);

// 16 random bytes as 32 lowercase hex digits.
std::string make_job_token();

}  // namespace ringgrad::launch
