// tests/tools/probe/signal_report.h: one line saying which signals this process ignores and which
// it blocks, for the tests of what a launcher passes on to its ranks (and gives back to its caller).
//
//   signals ignored=1,13 blocked=17        (signal numbers 1..31, ascending; empty lists when none)
#pragma once

#include <signal.h>

#include <string>

namespace probe {

inline std::string signal_report() {
  std::string ignored, blocked;
  sigset_t mask;
  sigprocmask(SIG_SETMASK, nullptr, &mask);
  for (int signo = 1; signo < 32; ++signo) {
    struct sigaction sa {};
    if (sigaction(signo, nullptr, &sa) == 0 && !(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_IGN)
      ignored += (ignored.empty() ? "" : ",") + std::to_string(signo);
    if (sigismember(&mask, signo) == 1) blocked += (blocked.empty() ? "" : ",") + std::to_string(signo);
  }
  return "signals ignored=" + ignored + " blocked=" + blocked + "\n";
}

}  // namespace probe
