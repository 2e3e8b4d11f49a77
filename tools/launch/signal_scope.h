// tools/launch/signal_scope.h: the signals the launcher handles, what each does to the job, and
// the scope in which its handlers are installed. The handler itself only writes the signal's
// number into a pipe that the launcher's poll() loop reads (read_fd()); the loop does the rest.
#pragma once

#include <signal.h>

#include <cstddef>

namespace ringgrad::launch {

// What the launcher does with each signal it catches. SIGINT, SIGTERM and SIGHUP stop the job the
// way a terminal or `kill` means it; SIGQUIT (Ctrl-\) too, forwarded as itself so that the ranks
// quit (and dump core) as they would in the terminal's group. SIGALRM and SIGXCPU are about the
// launcher's own timer and CPU limit (`timeout -s ALRM`, `ulimit -t`): the ranks get SIGTERM, as
// for any other stop. SIGUSR1 and SIGUSR2 are passed on and the job goes on: programs use them to
// checkpoint or to report.
//
// Job control: the ranks lead process groups of their own, so the terminal's Ctrl-Z (SIGTSTP)
// reaches the launcher alone, as do SIGTTIN and SIGTTOU (the launcher read or wrote the terminal
// from the background; ringrun's ranks never do, their stdin is /dev/null and their output goes
// through the launcher -- without prefix_output, as the benchmarks start them, a rank writing to a
// terminal set to `stty tostop` from the background stops itself, unseen). For each of the three
// the ranks get SIGTSTP -- to a rank, all three mean "the job is being stopped", and SIGTSTP is the
// one programs catch to stop cleanly -- then the launcher stops itself with the signal it got, so
// that the shell sees the job stopped. SIGCONT (fg, bg, `kill -CONT`) continues every rank,
// whoever stopped it. SIGSTOP cannot be caught: `kill -STOP` of the launcher stops it alone, and
// its ranks run on until they fill their pipes.
enum class OnSignal { Stop, StopWithSigterm, Forward, Suspend, Resume };

struct HandledSignal {
  int signo;
  const char* name;
  OnSignal action;
};

inline constexpr HandledSignal kHandledSignals[] = {
    {SIGINT, "SIGINT", OnSignal::Stop},
    {SIGTERM, "SIGTERM", OnSignal::Stop},
    {SIGHUP, "SIGHUP", OnSignal::Stop},
    {SIGQUIT, "SIGQUIT", OnSignal::Stop},
    {SIGALRM, "SIGALRM", OnSignal::StopWithSigterm},
    {SIGXCPU, "SIGXCPU", OnSignal::StopWithSigterm},
    {SIGUSR1, "SIGUSR1", OnSignal::Forward},
    {SIGUSR2, "SIGUSR2", OnSignal::Forward},
    {SIGTSTP, "SIGTSTP", OnSignal::Suspend},
    {SIGTTIN, "SIGTTIN", OnSignal::Suspend},
    {SIGTTOU, "SIGTTOU", OnSignal::Suspend},
    {SIGCONT, "SIGCONT", OnSignal::Resume},
};
inline constexpr size_t kHandledCount = sizeof kHandledSignals / sizeof kHandledSignals[0];

inline const HandledSignal* handled_signal(int signo) {
  for (const HandledSignal& h : kHandledSignals)
    if (h.signo == signo) return &h;
  return nullptr;
}

// The launcher's handlers for as long as it lives; the caller's come back afterwards (a benchmark
// goes on to run its references, a test program its next test).
//
// A signal the launcher inherited as ignored stays ignored: `nohup ringrun ...` ignores SIGHUP, and
// a shell's `ringrun ... &` ignores SIGINT and SIGQUIT, so that logging out or Ctrl-C in that
// terminal leaves the job alone. Catching one would also undo the ignore in the ranks (exec resets
// a caught signal to its default, and keeps an ignored one ignored). SIGCHLD is the exception: the
// loop needs it, and an ignored SIGCHLD would let the kernel reap the ranks before the launcher
// could read their exit status.
//
// The signals it catches are unblocked for the job -- a caller that inherited a blocked SIGCHLD
// would otherwise wait forever for a rank's exit when no output pipe wakes the loop -- and the
// caller's mask comes back afterwards. The ranks start with the caller's mask (caller_mask()), as
// any program a shell starts does: the launcher changes no more about them than it must.
class SignalScope {
 public:
  SignalScope();  // throws std::runtime_error when it cannot make its pipe
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  int read_fd() const { return read_fd_; }
  const sigset_t& caller_mask() const { return caller_mask_; }

 private:
  int read_fd_ = -1;
  struct sigaction saved_[kHandledCount] {};
  struct sigaction saved_chld_ {};
  struct sigaction saved_pipe_ {};
  sigset_t caller_mask_{};
};

}  // namespace ringgrad::launch
