// tools/launch/ringrun.cpp: the launcher. Starts N copies of a program with the variables
// init_process_group reads, prefixes their output with the rank, and stops the job when one dies.
//
//   ringrun --nproc-per-node 4 ./train --epochs 3
//   ringrun --nnodes 2 --node-rank 1 --nproc-per-node 8 --master-addr 10.0.0.1 ./train   (on node 1)
//
// Environment  each rank gets RANK = node_rank*N + local_rank, WORLD_SIZE = nnodes*N, LOCAL_RANK,
//              LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, RINGGRAD_LAUNCHER=ringrun (a program can
//              tell it runs in a job ringrun started), RINGGRAD_TIMEOUT with --timeout, and
//              RINGGRAD_JOB_TOKEN: random per job, or the one ringrun inherited; with --nnodes > 1 it
//              must be inherited, so that every node has the same one. stdin is /dev/null: N
//              processes cannot share one terminal's input.
// Output       each line a rank writes appears as "[rank k] line" on the same stream (stdout or
//              stderr) of ringrun. A rank's output ends when the rank exits; a last line without a
//              newline is printed with one. A reader that stops reading (`ringrun ... | less`,
//              paused) holds up nothing but its output: ringrun keeps reading the ranks, and acts
//              on signals and failures at once. What the reader has not taken waits, at most 4 MiB
//              per stream; past that the oldest lines are dropped, whole, and one line in their
//              place says how many, of which ranks. ringrun's own messages are never dropped. Once
//              the ranks are done, ringrun waits for the reader until it has taken nothing for 2 s.
// Failure      the first rank that exits non-zero or is killed by a signal is named on stderr; every
//              rank then gets SIGTERM (and SIGCONT, so that a stopped rank acts on it), and SIGKILL
//              if it is still running --grace-ms later.
// Signals      SIGINT, SIGTERM, SIGHUP and SIGQUIT (Ctrl-\) to ringrun are forwarded to every rank
//              and stop the job; SIGALRM and SIGXCPU stop it with SIGTERM to the ranks; SIGUSR1 and
//              SIGUSR2 are forwarded and the job goes on (a program may checkpoint on `kill -USR1`).
//              Ctrl-Z (SIGTSTP) stops every rank, with SIGTSTP, and then ringrun, so the whole job
//              stops; so do SIGTTIN and SIGTTOU (ringrun in the background, writing to a terminal
//              set to `stty tostop`). SIGCONT -- the shell's fg or bg -- continues every rank. Only
//              `kill -STOP` of ringrun, which cannot be caught, stops ringrun alone; its ranks run
//              on until their output pipes fill, and its SIGCONT continues them.
//              A signal ringrun inherited as ignored stays ignored, in the ranks too: `nohup ringrun
//              ... &` survives logging out. The ranks start with the signal mask ringrun inherited.
// Exit status  0 when every rank exits 0. Otherwise the first failure's, the way a shell reports it:
//              its exit status, or 128+signal when it was killed (137 for SIGKILL). When a signal to
//              ringrun stops the job: 128+signal (130 for Ctrl-C). Bad usage: 2.
//              A program that cannot be started: 127. Any other error of ringrun's own: 1.
//
// Process groups. Each rank leads its own process group, and ringrun signals the group (kill(-pid)),
// not only the rank: a rank that is a shell script, or that forked helpers, is stopped whole. So
// Ctrl-C in a terminal -- which the kernel sends to the foreground process group -- reaches ringrun
// alone, and ringrun forwards it once to every rank (ranks left in ringrun's group would get it
// twice, from the terminal and from ringrun). Ctrl-Z too: ringrun stops the ranks before itself,
// or the shell would say "Stopped" while they trained on. SIGTERM, SIGHUP (a closed terminal) and
// the others above are forwarded the same way; ringrun then waits for the ranks, SIGKILLs what is
// left after the grace period, and before returning SIGKILLs anything still in a rank's group. Only SIGKILL of ringrun
// itself leaves ranks behind, since nothing can catch it; they lose their output pipes and die of SIGPIPE at their next
// write.
//
// A rank that has exited stays a zombie (waitid with WNOWAIT) until ringrun is done: a zombie still
// holds its pid, so the pid -- which is also the group id ringrun signals -- cannot be given to an
// unrelated process meanwhile. One loop does everything: poll() over the ranks' pipes, a
// self-pipe that the signal handler writes to (SIGCHLD included, so an exit wakes the loop), and,
// while output waits for them, ringrun's own stdout and stderr: no write ever blocks the loop.
//
// All of that lives in tools/launch/ (launcher.h), which the benchmarks that start their own ranks
// use too (bench/bench_launch.h); this file is the command line.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/launch/launcher.h"
#include "tools/cli/flags.h"

namespace {

constexpr const char* kSummary =
    "Starts N processes of `prog args...` with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
    "MASTER_ADDR, MASTER_PORT and RINGGRAD_JOB_TOKEN set, prefixes their output with \"[rank k] \",\n"
    "and stops the whole job when one of them fails.";

constexpr const char* kEpilogue =
    "With --nnodes > 1, export the same RINGGRAD_JOB_TOKEN on every node.\n"
    "Exit status: 0 if every rank exits 0; else the first failed rank's status (128+signal if it\n"
    "was killed); 128+signal if ringrun was interrupted; 2 for bad usage; 127 if prog cannot start.\n"
    "SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM and SIGXCPU stop the job; SIGUSR1 and SIGUSR2 are\n"
    "forwarded to every rank and the job goes on. Ctrl-Z (SIGTSTP, SIGTTIN, SIGTTOU) stops every\n"
    "rank with ringrun; fg or bg (SIGCONT) continues them. A signal ignored when ringrun starts\n"
    "stays ignored. Output nobody reads waits, up to 4 MiB a stream; then the oldest lines are\n"
    "dropped, and a line says how many.\n";

// Parses argv into `job` and checks what the parser cannot: the flags against each other.
void check_args(ringgrad::cli::FlagParser& flags, int argc, char** argv, ringgrad::launch::JobOptions& job,
                const double& timeout_s) {
  // Flags come first; the first word that is not a flag (or the word after `--`) is the program,
  // and everything after it belongs to the program.
  job.command = flags.parse_or_throw(argc, argv, ringgrad::cli::Positionals::StopAtFirst);
  if (flags.help_requested()) return;
  if (job.command.empty()) flags.fail("expected a program to run after the flags, got none");
  if (job.master_addr.empty()) flags.fail("--master-addr expects a host name or address, got ''");
  // The library's own bound on RINGGRAD_TIMEOUT (parallel/launch_info.cpp): better refused here
  // than by every rank at init_process_group.
  if (flags.was_set("--timeout") && !(timeout_s > 0 && timeout_s <= 30 * 86400.0))
    flags.fail("--timeout expects a number of seconds in (0, 2592000], got '" + flags.value("--timeout") + "'");
  if (static_cast<long long>(job.nnodes) * job.nproc_per_node > ringgrad::launch::kMaxWorldSize)
    flags.fail("--nnodes " + std::to_string(job.nnodes) + " times --nproc-per-node " +
               std::to_string(job.nproc_per_node) + " expects at most " +
               std::to_string(ringgrad::launch::kMaxWorldSize) + " ranks in the job (WORLD_SIZE), got " +
               std::to_string(static_cast<long long>(job.nnodes) * job.nproc_per_node));
  if (job.node_rank >= job.nnodes)
    flags.fail("--node-rank expects a value in [0, " + std::to_string(job.nnodes - 1) + "] for --nnodes " +
               std::to_string(job.nnodes) + ", got " + std::to_string(job.node_rank));
  if (job.nnodes > 1 && job.master_port == 0)
    flags.fail(
        "--master-port 0 (pick a free port) works only with --nnodes 1: the other nodes could not "
        "learn the port; give every node the same fixed --master-port");
}

// The job ringrun's command line asks for. --help prints the help and exits 0; bad usage prints
// what was wrong and the usage line, and exits 2.
ringgrad::launch::JobOptions parse_args(int argc, char** argv) {
  ringgrad::launch::JobOptions job;
  job.name = "ringrun";
  double timeout_s = 0;  // 0: not given, the ranks use the library's own timeouts
  ringgrad::cli::FlagParser flags("ringrun", kSummary, "prog [args...]");
  flags.set_epilogue(kEpilogue);
  flags.add_int("--nproc-per-node", &job.nproc_per_node, "processes on this node", 1, 4096);
  flags.add_int("--nnodes", &job.nnodes, "nodes in the job; start ringrun once on each", 1, 1 << 20);
  flags.add_int("--node-rank", &job.node_rank, "this node's index in [0, nnodes)", 0, 1 << 20);
  flags.add_string("--master-addr", &job.master_addr, "address of rank 0's store").metavar("A");
  flags.add_int("--master-port", &job.master_port, "its port; 0 picks a free one (single node only)", 0, 65535)
      .metavar("P");
  // Any number is read, so that 0 or -1 gets ringrun's "> 0" message below rather than a range.
  flags.add_double("--timeout", &timeout_s, "seconds a rank waits for the others (exported as RINGGRAD_TIMEOUT)")
      .metavar("SECONDS")
      .default_text("the library's, 60 s for setup");
  flags.add_int("--grace-ms", &job.grace_ms, "after SIGTERM, wait this long before SIGKILL", 0, 24 * 3600 * 1000)
      .metavar("G");
  try {
    check_args(flags, argc, argv, job, timeout_s);
  } catch (const ringgrad::cli::FlagError& e) {
    std::fprintf(stderr, "%s\n%s", e.what(), flags.usage().c_str());
    std::exit(2);
  }
  if (flags.help_requested()) {
    std::fputs(flags.help().c_str(), stdout);
    std::exit(0);
  }
  if (flags.was_set("--timeout")) job.extra_env.push_back("RINGGRAD_TIMEOUT=" + flags.value("--timeout"));
  return job;
}

// The launcher's dup2 onto fd 1 or 2 would misbehave if a pipe got that number, which happens when
// ringrun itself was started with stdout or stderr closed; /dev/null fills any gap.
void ensure_standard_fds_open() {
  for (int fd = 0; fd <= 2; ++fd)
    if (fcntl(fd, F_GETFD) < 0) {
      const int opened = open("/dev/null", O_RDWR);
      if (opened >= 0 && opened != fd) {
        dup2(opened, fd);
        close(opened);
      }
    }
}

}  // namespace

int main(int argc, char** argv) {
  ensure_standard_fds_open();
  const ringgrad::launch::JobOptions job = parse_args(argc, argv);
  try {
    return ringgrad::launch::run_job(job);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringrun: %s\n", e.what());
    return 1;
  }
}
