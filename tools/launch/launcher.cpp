// tools/launch/launcher.cpp: the job -- start the ranks, watch them, stop them (launcher.h).
//
// Each rank leads its own process group, and the launcher signals the group (kill(-pid)), so a rank
// that is a shell script, or that forked helpers, is stopped whole. A rank that has exited stays a
// zombie (waitid with WNOWAIT) until the job is done: a zombie still holds its pid, which is also
// the group id the launcher signals, so the id cannot be given to an unrelated process meanwhile.
// One loop does everything: poll() over the ranks' pipes, a self-pipe that the signal handler
// writes to (signal_scope.h; SIGCHLD included, so an exit wakes the loop), and the launcher's own
// stdout and stderr while output waits for them (output_queue.h: nothing blocks on a reader that
// stopped reading). tools/launch/ringrun.cpp's header says why.
#include "tools/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>

#include "tools/launch/job_environment.h"
#include "tools/launch/output_queue.h"
#include "tools/launch/rank_output.h"
#include "tools/launch/signal_scope.h"

namespace ringgrad::launch {

namespace {

using Clock = std::chrono::steady_clock;

// Once every rank is done, how long the reader of the launcher's output may take nothing before
// the rest is given up: a reader that never reads must not keep the launcher forever.
constexpr std::chrono::milliseconds kOutputStall{2000};

std::string errno_text() { return std::strerror(errno); }

// Both ends close-on-exec, so no rank inherits another rank's pipe (the child's dup2 clears the
// flag on the copy that becomes the rank's stdout or stderr).
void make_pipe(int fds[2]) {
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed: " + errno_text());
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// --- the job -------------------------------------------------------------------------------------------

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool exited = false;
  RankStream out, err;  // fd -1 throughout when the output is not prefixed
};

std::string describe_exit(const Rank& r, const siginfo_t& info) {
  std::string text = "rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ")";
  if (info.si_code == CLD_EXITED) return text + " exited with status " + std::to_string(info.si_status);
  text += " was killed by signal " + std::to_string(info.si_status) + " (" + strsignal(info.si_status) + ")";
  return info.si_code == CLD_DUMPED ? text + ", core dumped" : text;
}

class Job {
 public:
  explicit Job(const JobOptions& opt) : opt_(opt) {}

  int run() {
    SignalScope signals;
    wake_read_fd_ = signals.read_fd();
    rank_mask_ = &signals.caller_mask();
    try {
      open_outputs();
      const std::vector<std::string> env = shared_environment(opt_);
      std::fflush(nullptr);  // what the caller printed comes before what the ranks print
      for (int local = 0; local < opt_.nproc_per_node && !stopping_; ++local) start_rank(local, env);
      loop();
    } catch (...) {
      // The launcher itself failed (out of file descriptors, say): leave no rank behind, then report.
      begin_stop(1, SIGKILL);
      finish();
      flush_output();
      throw;
    }
    const int exit_code = finish();
    flush_output();
    return exit_code;
  }

 private:
  // Starts argv (searched in PATH, as execvp does) as a rank: the leader of a new process group
  // (see the top of the file), stdin from /dev/null, stdout and stderr into the pipes when they are
  // given, SIGPIPE at its default (ignored here), the caller's signal mask -- and set to die with
  // this launcher. That last one is PR_SET_PDEATHSIG, which only the child itself can set, between
  // fork and exec, so this is fork and exec rather than posix_spawn: a launcher killed by SIGKILL
  // (the OOM killer, a scheduler's hard stop, a test taking a host down) then takes its ranks with
  // it, as a machine that goes down does, instead of leaving them running headless. (The signal
  // reaches the ranks themselves; processes a rank started are the rank's to stop, and orphans of a
  // rank that is a wrapper script stay behind. A watchdog holding the process groups would close
  // that gap.) The child runs
  // only async-signal-safe calls; a failed exec comes back through a close-on-exec pipe. Returns 0
  // or the errno of what failed.
  int spawn(pid_t& pid, const std::vector<char*>& argv, const std::vector<char*>& envp, int out_fd, int err_fd) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) return errno;
    // Nothing is delivered between fork and exec: the child would run the launcher's handlers.
    sigset_t all, before;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &before);
    const pid_t launcher = getpid();
    pid = fork();
    if (pid == 0) {
      auto fail = [&](int err) {
        (void)!write(report[1], &err, sizeof(err));
        _exit(127);
      };
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
      if (getppid() != launcher) _exit(137);  // the launcher died before the line above: so does the rank
      setpgid(0, 0);
      const int in = open("/dev/null", O_RDONLY);
      if (in < 0 || dup2(in, 0) < 0) fail(errno);
      if (in != 0) close(in);  // the rank gets it as its stdin only
      if ((out_fd >= 0 && dup2(out_fd, 1) < 0) || (err_fd >= 0 && dup2(err_fd, 2) < 0)) fail(errno);
      // exec resets caught signals to their default but keeps ignored ones ignored: SIGPIPE,
      // ignored here, must be the default again in the rank. The launcher's handlers go first, so
      // nothing that arrives once the mask is the caller's again runs them.
      struct sigaction default_action {};
      default_action.sa_handler = SIG_DFL;
      sigaction(SIGPIPE, &default_action, nullptr);
      sigaction(SIGCHLD, &default_action, nullptr);
      for (const HandledSignal& handled : kHandledSignals) {
        struct sigaction current {};
        sigaction(handled.signo, nullptr, &current);
        if (current.sa_handler != SIG_IGN) sigaction(handled.signo, &default_action, nullptr);
      }
      pthread_sigmask(SIG_SETMASK, rank_mask_, nullptr);  // the caller's, not ours: see SignalScope
      execvpe(argv[0], argv.data(), envp.data());
      fail(errno);
    }
    const int fork_error = pid < 0 ? errno : 0;
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    close(report[1]);
    if (fork_error != 0) {
      close(report[0]);
      return fork_error;
    }
    int exec_error = 0;
    ssize_t got;
    do got = read(report[0], &exec_error, sizeof(exec_error));
    while (got < 0 && errno == EINTR);
    close(report[0]);
    if (got == static_cast<ssize_t>(sizeof(exec_error))) {
      waitpid(pid, nullptr, 0);  // it exited at once; nobody else may reap it
      return exec_error;
    }
    return 0;  // end of file: the exec closed the pipe
  }

  void start_rank(int local, std::vector<std::string> env) {
    Rank r;
    r.rank = opt_.node_rank * opt_.nproc_per_node + local;
    env.push_back("RANK=" + std::to_string(r.rank));
    env.push_back("LOCAL_RANK=" + std::to_string(local));
    std::vector<char*> envp, argv;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> command = opt_.command;
    for (std::string& a : command) argv.push_back(a.data());
    argv.push_back(nullptr);

    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    if (opt_.prefix_output) {
      make_pipe(out_pipe);
      try {
        make_pipe(err_pipe);
      } catch (...) {
        close(out_pipe[0]);
        close(out_pipe[1]);
        throw;
      }
    }
    const int rc = spawn(r.pid, argv, envp, out_pipe[1], err_pipe[1]);
    if (opt_.prefix_output) {
      close(out_pipe[1]);  // the rank holds the write ends now; ours would keep end-of-file away
      close(err_pipe[1]);
    }
    if (rc != 0) {
      if (opt_.prefix_output) {
        close(out_pipe[0]);
        close(err_pipe[0]);
      }
      say("cannot start rank " + std::to_string(r.rank) + ": '" + argv[0] + "': " + std::strerror(rc));
      begin_stop(127, SIGTERM);
      return;
    }
    if (opt_.prefix_output) {
      const std::string prefix = "[rank " + std::to_string(r.rank) + "] ";
      r.out = RankStream{out_pipe[0], stdout_, r.rank, prefix, {}};
      r.err = RankStream{err_pipe[0], stderr_, r.rank, prefix, {}};
      set_nonblocking(r.out.fd);
      set_nonblocking(r.err.fd);
    }
    ranks_.push_back(std::move(r));
  }

  // Sends signo to every rank's process group -- exited ranks' too, for helpers they left behind.
  // A stopped process does not act on SIGTERM (or SIGINT, SIGHUP) until it is continued, so those
  // are followed by SIGCONT: a rank stopped by SIGSTOP is then stopped for good at once instead of
  // at the end of the grace period.
  void signal_groups(int signo) {
    for (const Rank& r : ranks_) {
      kill(-r.pid, signo);
      if (signo != SIGKILL) kill(-r.pid, SIGCONT);
    }
  }

  // The first reason to stop sets the exit status; the ranks get `signo` now and SIGKILL after the
  // grace period.
  void begin_stop(int exit_code, int signo) {
    if (!stopping_) {
      stopping_ = true;
      exit_code_ = exit_code;
      kill_at_ = Clock::now() + std::chrono::milliseconds(opt_.grace_ms);
    }
    signal_groups(signo);
  }

  bool all_exited() const {
    return std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.exited; });
  }

  void loop() {
    while (!all_exited()) {
      int timeout_ms = -1;
      if (kill_at_) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at_ - Clock::now());
        timeout_ms = static_cast<int>(std::max<long long>(0, left.count() + 1));
      }
      poll_once(timeout_ms);
      collect_exits();
      if (kill_at_ && Clock::now() >= *kill_at_) {
        for (const Rank& r : ranks_)
          if (!r.exited)
            say("rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ") still running " +
                std::to_string(opt_.grace_ms) + " ms after it was told to stop; sending SIGKILL");
        signal_groups(SIGKILL);
        kill_at_.reset();
      }
    }
  }

  // One poll() over everything the launcher waits for -- the signal pipe, the ranks' pipes, and its
  // own stdout and stderr while output waits for them -- and one round of acting on what is ready.
  // Never blocks anywhere else, so a reader that stops reading holds up nothing but its own output.
  // Returns whether the launcher's output went out (any of it).
  bool poll_once(int timeout_ms) {
    std::vector<pollfd> fds{{wake_read_fd_, POLLIN, 0}};
    std::vector<RankStream*> streams;
    for (Rank& r : ranks_)
      for (RankStream* s : {&r.out, &r.err})
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          streams.push_back(s);
        }
    std::vector<OutputQueue*> writers;
    for (const std::unique_ptr<OutputQueue>& q : queues_) {
      if (!q->waiting()) continue;
      if (q->poll_fd() < 0) {  // backing off: wake up when it ends
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(q->retry_at() - Clock::now());
        const int retry_ms = static_cast<int>(std::max<long long>(0, left.count() + 1));
        timeout_ms = timeout_ms < 0 ? retry_ms : std::min(timeout_ms, retry_ms);
        continue;
      }
      fds.push_back({q->poll_fd(), POLLOUT, 0});
      writers.push_back(q.get());
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR)
      throw std::runtime_error("poll failed: " + errno_text());

    if (fds[0].revents & POLLIN) handle_signals();
    for (size_t i = 0; i < streams.size(); ++i)
      if (fds[1 + i].revents & (POLLIN | POLLHUP | POLLERR)) read_stream(*streams[i], /*drain=*/false);
    bool wrote = false;
    for (size_t i = 0; i < writers.size(); ++i)
      if (fds[1 + streams.size() + i].revents & (POLLOUT | POLLHUP | POLLERR)) wrote |= writers[i]->write_some();
    return wrote;
  }

  // The launcher's stdout and stderr, as queues (output_queue.h); one queue for both when they are
  // the same pipe or terminal.
  void open_outputs() {
    queues_.push_back(std::make_unique<OutputQueue>(1, opt_.name));
    stdout_ = queues_.back().get();
    if (OutputQueue::shares_destination(1, 2)) {
      stderr_ = stdout_;
    } else {
      queues_.push_back(std::make_unique<OutputQueue>(2, opt_.name));
      stderr_ = queues_.back().get();
    }
  }

  // A message of the launcher's own on its stderr, "ringrun: text".
  void say(const std::string& text) { stderr_->push_message(opt_.name + ": " + text + "\n"); }

  // Once the ranks are done: what is still queued goes out as the reader takes it, until it has
  // taken nothing for kOutputStall, or a signal that would stop the job says to stop now.
  void flush_output() {
    Clock::time_point last_taken = Clock::now();
    for (;;) {
      const bool waiting = std::any_of(queues_.begin(), queues_.end(),
                                       [](const std::unique_ptr<OutputQueue>& q) { return q->waiting(); });
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(last_taken + kOutputStall - Clock::now());
      if (!waiting || abandon_output_ || left.count() <= 0) return;
      if (poll_once(static_cast<int>(left.count()) + 1)) last_taken = Clock::now();
    }
  }

  void handle_signals() {
    unsigned char signos[64];
    ssize_t n;
    int suspend_signo = 0;
    while ((n = read(wake_read_fd_, signos, sizeof signos)) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        const int signo = signos[i];
        const HandledSignal* h = handled_signal(signo);
        if (h == nullptr) continue;  // SIGCHLD: collect_exits runs after every wake-up anyway
        if (finished_ && (h->action == OnSignal::Stop || h->action == OnSignal::StopWithSigterm)) {
          abandon_output_ = true;  // the ranks are gone already: only the output was left
          continue;
        }
        switch (h->action) {
          case OnSignal::Stop:
            say(std::string("got ") + h->name + "; forwarding it to every rank");
            begin_stop(128 + signo, signo);  // a second Ctrl-C is forwarded too, but keeps the first status
            break;
          case OnSignal::StopWithSigterm:
            say(std::string("got ") + h->name + "; stopping every rank with SIGTERM");
            begin_stop(128 + signo, SIGTERM);
            break;
          case OnSignal::Forward:
            // Not followed by SIGCONT: a rank stopped on purpose gets it when it is continued.
            say(std::string("got ") + h->name + "; forwarding it to every rank, the job goes on");
            for (const Rank& r : ranks_) kill(-r.pid, signo);
            break;
          // No message for these two: the shell reports the stop and the continue itself, and a
          // message written on the way to stopping could itself stop a background launcher (SIGTTOU).
          case OnSignal::Suspend: suspend_signo = signo; break;
          case OnSignal::Resume: continue_groups(); break;
        }
      }
    }
    // Stop requests that piled up (Ctrl-Z pressed twice) stop the job once: a second one acted on
    // after `fg` would stop it again at once.
    if (suspend_signo != 0) suspend_job(suspend_signo);
  }

  // Stops every rank with SIGTSTP, then the launcher itself with `signo` at its default action;
  // returns when the launcher is continued, and continues the ranks. When the launcher's process
  // group is orphaned (its shell has gone) the kernel discards the stop and this returns at once,
  // so the ranks are not left stopped with nobody to continue them. A grace period that was running
  // is moved on by the time stopped: a stopped rank could not use it.
  void suspend_job(int signo) {
    for (const Rank& r : ranks_) kill(-r.pid, SIGTSTP);
    struct sigaction ours {};
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    sigaction(signo, &default_action, &ours);
    const Clock::time_point stopped_at = Clock::now();
    raise(signo);  // unblocked (SignalScope), so delivered before raise returns: stopped here until SIGCONT
    sigaction(signo, &ours, nullptr);
    if (kill_at_) *kill_at_ += Clock::now() - stopped_at;
    continue_groups();
  }

  // SIGCONT to every rank's process group: to the ranks the launcher stopped, and to one stopped by
  // anything else (`kill -STOP`), which would otherwise hold the job up with nobody to continue it.
  void continue_groups() {
    for (const Rank& r : ranks_) kill(-r.pid, SIGCONT);
  }

  // Notes every rank that has exited since the last call. WNOWAIT leaves it a zombie (see the top).
  void collect_exits() {
    for (Rank& r : ranks_) {
      if (r.exited) continue;
      siginfo_t info;
      std::memset(&info, 0, sizeof info);
      if (waitid(P_PID, static_cast<id_t>(r.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0)
        continue;
      r.exited = true;
      // Everything the rank wrote before exiting is in its pipes now; what a helper it left behind
      // writes later is not waited for, or the launcher could hang on a daemon.
      for (RankStream* s : {&r.out, &r.err})
        if (s->fd >= 0) read_stream(*s, /*drain=*/true);
      const bool failed = info.si_code != CLD_EXITED || info.si_status != 0;
      if (failed && !stopping_) {
        say(describe_exit(r, info) + (ranks_.size() > 1 ? "; stopping the other ranks" : ""));
        begin_stop(info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status, SIGTERM);
      }
    }
  }

  int finish() {
    if (stopping_) signal_groups(SIGKILL);  // helpers that outlived their rank
    for (Rank& r : ranks_) {
      int status;
      while (waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
      }
      for (RankStream* s : {&r.out, &r.err})
        if (s->fd >= 0) {
          close(s->fd);
          s->fd = -1;
        }
    }
    // Reaped: their pids, and so their group ids, may be anyone's now. Nothing signals them again.
    ranks_.clear();
    finished_ = true;
    return exit_code_;
  }

  const JobOptions& opt_;
  std::vector<Rank> ranks_;
  int wake_read_fd_ = -1;
  const sigset_t* rank_mask_ = nullptr;  // the mask the ranks start with (SignalScope::caller_mask)
  bool stopping_ = false;
  int exit_code_ = 0;
  std::optional<Clock::time_point> kill_at_;  // when the ranks still running get SIGKILL
  std::vector<std::unique_ptr<OutputQueue>> queues_;
  OutputQueue* stdout_ = nullptr;  // the launcher's stdout and stderr: queues_, one or two of them
  OutputQueue* stderr_ = nullptr;
  bool finished_ = false;        // every rank reaped; only output is left (flush_output)
  bool abandon_output_ = false;  // a stopping signal came while it was
};

}  // namespace

int run_job(const JobOptions& options) {
  if (options.command.empty()) throw std::runtime_error(options.name + ": no program to run");
  const long long world = static_cast<long long>(options.nnodes) * options.nproc_per_node;
  if (options.nnodes < 1 || options.nproc_per_node < 1 || world > kMaxWorldSize)
    throw std::runtime_error(options.name + ": expected nnodes * nproc_per_node in [1, " +
                             std::to_string(kMaxWorldSize) + "], got " + std::to_string(options.nnodes) + " * " +
                             std::to_string(options.nproc_per_node));
  return Job(options).run();
}

}  // namespace ringgrad::launch
