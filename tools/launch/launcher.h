// tools/launch/launcher.h: starts the N ranks of a job and watches them to the end -- the one
// implementation behind ringrun and the benchmarks that start their own ranks (bench/bench_launch.h).
//
// Plain POSIX C++17; it does not link the ringgrad library, so a launcher still starts when the
// library -- or the GPU driver under it -- is what is broken.
//
// Environment  each rank gets RANK = node_rank*N + local_rank, WORLD_SIZE = nnodes*N, LOCAL_RANK,
//              LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, RINGGRAD_LAUNCHER (the launcher's name:
//              a program can tell whose job it is in) and RINGGRAD_JOB_TOKEN: random per job, or the
//              one inherited; with nnodes > 1 it must be inherited, so that every node has the same
//              one. Plus `extra_env`. These replace inherited variables of the same names. stdin is
//              /dev/null: N processes cannot share one terminal's input.
// Output       with prefix_output, each line a rank writes appears as "[rank k] line" on the same
//              stream (stdout or stderr) of the launcher, a last line without a newline gets one;
//              without it, the ranks write straight to the launcher's stdout and stderr (so a
//              launcher killed by SIGKILL, which nothing can catch, leaves them running until they
//              fail on their own; with pipes they would die of SIGPIPE at their next write).
//              The launcher never blocks on its own stdout or stderr (output_queue.h): while the
//              reader does not read (`| less`, paused), lines wait, at most 4 MiB per stream; past
//              that the oldest are dropped, and the reader gets one line in their place saying how
//              many, of which ranks. Its own messages are never dropped. Once every rank is done,
//              the reader has until it has taken nothing for 2 s, and the rest is given up.
// Failure      the first rank that exits non-zero or is killed by a signal is named on stderr; every
//              rank's process group then gets SIGTERM (and SIGCONT, so that a stopped rank acts on
//              it), and SIGKILL if it is still running grace_ms later.
// Signals      SIGINT, SIGTERM, SIGHUP and SIGQUIT to the launcher are forwarded to every rank and
//              stop the job; SIGALRM and SIGXCPU stop it with SIGTERM to the ranks; SIGUSR1 and SIGUSR2
//              are forwarded and the job goes on. SIGTSTP (Ctrl-Z), SIGTTIN and SIGTTOU stop every
//              rank (with SIGTSTP), then the launcher; SIGCONT (fg, bg) continues every rank. SIGSTOP
//              cannot be caught: it stops the launcher alone. One the launcher inherited as ignored
//              stays ignored, in the ranks too (`nohup`). The ranks start with the signal mask the
//              caller had.
// Exit status  0 when every rank exits 0. Otherwise the first failure's, the way a shell reports it:
//              its exit status, or 128+signal when it was killed (137 for SIGKILL). When a signal
//              stops the job: 128+signal (130 for Ctrl-C). A program that cannot be started: 127.
//
// tools/launch/ringrun.cpp's header explains the process groups, the zombies and the one poll() loop.
#pragma once

#include <string>
#include <vector>

namespace ringgrad::launch {

struct JobOptions {
  std::string name = "ringrun";      // starts the launcher's own messages; RINGGRAD_LAUNCHER's value
  std::vector<std::string> command;  // the program (searched on PATH when it has no '/') and its arguments
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0: a free port on master_addr (single node only)
  int grace_ms = 5000;      // after SIGTERM, how long a rank has before SIGKILL
  bool prefix_output = true;
  std::vector<std::string> extra_env;  // "NAME=value", for every rank
};

// The most ranks one job may have (nnodes * nproc_per_node): WORLD_SIZE and RANK must fit an int
// with room to spare, and no real job comes near it.
constexpr int kMaxWorldSize = 1 << 20;

// Runs the job to its end and returns the exit status above. The signal handlers it installs (the
// signals above, SIGCHLD and SIGPIPE) and the signal mask are put back as they were before it
// returns. Throws std::runtime_error for options out of range, and for an error of the launcher's
// own (no file descriptors left, say) after SIGKILLing every rank it started.
int run_job(const JobOptions& options);

}  // namespace ringgrad::launch
