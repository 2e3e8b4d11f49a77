// tools/ringrun.cpp: the launcher. Starts N copies of a program with the variables
// init_process_group reads, prefixes their output with the rank, and stops the job when one dies.
//
//   ringrun --nproc-per-node 4 ./train --epochs 3
//   ringrun --nnodes 2 --node-rank 1 --nproc-per-node 8 --master-addr 10.0.0.1 ./train   (on node 1)
//
// Environment  each rank gets RANK = node_rank*N + local_rank, WORLD_SIZE = nnodes*N, LOCAL_RANK,
//              LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and RINGGRAD_JOB_TOKEN: random per job, or
//              the one ringrun inherited; with --nnodes > 1 it must be inherited, so that every node
//              has the same one. stdin is /dev/null: N processes cannot share one terminal's input.
// Output       each line a rank writes appears as "[rank k] line" on the same stream (stdout or
//              stderr) of ringrun. A rank's output ends when the rank exits; a last line without a
//              newline is printed with one.
// Failure      the first rank that exits non-zero or is killed by a signal is named on stderr; every
//              rank then gets SIGTERM, and SIGKILL if it is still running --grace-ms later.
// Exit status  0 when every rank exits 0. Otherwise the first failure's, the way a shell reports it:
//              its exit status, or 128+signal when it was killed (137 for SIGKILL). When ringrun
//              itself gets SIGINT, SIGTERM or SIGHUP: 128+signal (130 for Ctrl-C). Bad usage: 2.
//              A program that cannot be started: 127. Any other error of ringrun's own: 1.
//
// Process groups. Each rank leads its own process group, and ringrun signals the group (kill(-pid)),
// not only the rank: a rank that is a shell script, or that forked helpers, is stopped whole. So
// Ctrl-C in a terminal -- which the kernel sends to the foreground process group -- reaches ringrun
// alone, and ringrun forwards it once to every rank (ranks left in ringrun's group would get it
// twice, from the terminal and from ringrun). SIGTERM and SIGHUP (a closed terminal) are forwarded
// the same way; ringrun then waits for the ranks, SIGKILLs what is left after the grace period, and
// before returning SIGKILLs anything still in a rank's group. Only SIGKILL of ringrun itself leaves
// ranks behind, since nothing can catch it; they lose their output pipes and die of SIGPIPE at their
// next write.
//
// A rank that has exited stays a zombie (waitid with WNOWAIT) until ringrun is done: a zombie still
// holds its pid, so the pid -- which is also the group id ringrun signals -- cannot be given to an
// unrelated process meanwhile. One loop does everything: poll() over the ranks' pipes and a
// self-pipe that the signal handler writes to (SIGCHLD included, so an exit wakes the loop).
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: ringrun [--nproc-per-node N] [--nnodes M --node-rank R] [--master-addr A]\n"
    "               [--master-port P] [--grace-ms G] prog [args...]\n";

constexpr const char* kHelp =
    "Starts N processes of `prog args...` with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
    "MASTER_ADDR, MASTER_PORT and RINGGRAD_JOB_TOKEN set, prefixes their output with \"[rank k] \",\n"
    "and stops the whole job when one of them fails.\n"
    "\n"
    "  --nproc-per-node N  processes on this node (default 1)\n"
    "  --nnodes M          nodes in the job (default 1); start ringrun once on each\n"
    "  --node-rank R       this node's index in [0, M) (default 0)\n"
    "  --master-addr A     address of rank 0's store (default 127.0.0.1)\n"
    "  --master-port P     its port (default 29500); 0 picks a free one (single node only)\n"
    "  --grace-ms G        after SIGTERM, wait this long before SIGKILL (default 5000)\n"
    "  --help              this text\n"
    "\n"
    "With --nnodes > 1, export the same RINGGRAD_JOB_TOKEN on every node.\n"
    "Exit status: 0 if every rank exits 0; else the first failed rank's status (128+signal if it\n"
    "was killed); 128+signal if ringrun was interrupted; 2 for bad usage; 127 if prog cannot start.\n";

// A line longer than this is printed in pieces: a rank drawing a progress bar with '\r' never ends
// its line, and ringrun must not hold its output back forever.
constexpr size_t kMaxLineBytes = 64 * 1024;

struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int grace_ms = 5000;
  std::vector<std::string> command;  // prog and its arguments
};

struct UsageError {
  std::string message;
};
struct HelpRequested {};

int parse_int(const std::string& flag, const std::string& text, long min, long max) {
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < min || value > max)
    throw UsageError{flag + " expects an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                     "], got '" + text + "'"};
  return static_cast<int>(value);
}

// Flags come first, as `--flag value` or `--flag=value`; the first word that is not a flag (or the
// word after `--`) is the program, and everything after it belongs to the program.
Options parse_args(int argc, char** argv) {
  Options opt;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") throw HelpRequested{};
    if (arg.empty() || arg[0] != '-') break;
    const size_t eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    if (flag != "--nproc-per-node" && flag != "--nnodes" && flag != "--node-rank" && flag != "--master-addr" &&
        flag != "--master-port" && flag != "--grace-ms")
      throw UsageError{"unknown flag '" + flag + "' (see ringrun --help)"};
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else {
      if (i + 1 >= argc) throw UsageError{flag + " expects a value, got none"};
      value = argv[++i];
    }
    if (flag == "--nproc-per-node") opt.nproc_per_node = parse_int(flag, value, 1, 4096);
    if (flag == "--nnodes") opt.nnodes = parse_int(flag, value, 1, 1 << 20);
    if (flag == "--node-rank") opt.node_rank = parse_int(flag, value, 0, 1 << 20);
    if (flag == "--master-port") opt.master_port = parse_int(flag, value, 0, 65535);
    if (flag == "--grace-ms") opt.grace_ms = parse_int(flag, value, 0, 24 * 3600 * 1000);
    if (flag == "--master-addr") {
      if (value.empty()) throw UsageError{"--master-addr expects a host name or address, got ''"};
      opt.master_addr = value;
    }
  }
  opt.command.assign(argv + i, argv + argc);
  if (opt.command.empty()) throw UsageError{"expected a program to run after the flags, got none"};
  if (opt.node_rank >= opt.nnodes)
    throw UsageError{"--node-rank expects a value in [0, " + std::to_string(opt.nnodes - 1) + "] for --nnodes " +
                     std::to_string(opt.nnodes) + ", got " + std::to_string(opt.node_rank)};
  if (opt.nnodes > 1 && opt.master_port == 0)
    throw UsageError{"--master-port 0 (pick a free port) works only with --nnodes 1: the other nodes could not "
                     "learn the port; give every node the same fixed --master-port"};
  return opt;
}

std::string errno_text() { return std::strerror(errno); }

// Binds port 0 on `addr`, asks the kernel which port it chose, and lets it go. Rank 0's store binds
// it a moment later; another process could take it in between, and rank 0 would then report that
// its bind failed -- rare enough for a convenience flag.
int pick_free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(addr.c_str(), "0", &hints, &found);
  if (rc != 0) throw std::runtime_error("--master-port 0: cannot resolve '" + addr + "': " + gai_strerror(rc));
  int port = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && port < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      why = errno_text();
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
      port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    else
      why = errno_text();
    close(fd);
  }
  freeaddrinfo(found);
  if (port < 0) throw std::runtime_error("--master-port 0: cannot bind a port on " + addr + ": " + why);
  return port;
}

// 16 random bytes as 32 lowercase hex digits.
std::string make_job_token() {
  unsigned char bytes[16];
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open /dev/urandom for the job token: " + errno_text());
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = read(fd, bytes + got, sizeof bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      throw std::runtime_error("cannot read /dev/urandom for the job token");
    }
    got += static_cast<size_t>(n);
  }
  close(fd);
  static const char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  return token;
}

// --- signals: the handler only writes the signal's number into a pipe the main loop polls ------------

int g_wake_write_fd = -1;

extern "C" void on_signal(int signo) {
  const int saved_errno = errno;  // the interrupted code may be about to read errno
  const unsigned char byte = static_cast<unsigned char>(signo);
  // Non-blocking: if the pipe is full, the loop has plenty of wake-ups pending already.
  const ssize_t ignored = write(g_wake_write_fd, &byte, 1);
  (void)ignored;
  errno = saved_errno;
}

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

const char* signal_name(int signo) {
  switch (signo) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

// Both ends close-on-exec, so no rank inherits another rank's pipe (posix_spawn's dup2 clears the
// flag on the copy that becomes the rank's stdout or stderr).
void make_pipe(int fds[2]) {
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed: " + errno_text());
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our reader went away (EPIPE: SIGPIPE is ignored); the ranks still run to the end
    done += static_cast<size_t>(n);
  }
}

// --- one rank ------------------------------------------------------------------------------------------

// One output stream of a rank: the pipe it is read from, where its lines go (1 or 2), the prefix
// they get there, and the bytes of a line not yet complete.
struct Stream {
  int fd = -1;
  int dest_fd = 1;
  std::string prefix;  // "[rank k] "
  std::string pending;
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool exited = false;
  Stream out, err;
};

// Prints every complete line in s.pending, prefixed; keeps a trailing incomplete line unless `flush`.
void emit_lines(Stream& s, bool flush) {
  std::string text;
  size_t start = 0;
  for (size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1)
    text += s.prefix + s.pending.substr(start, nl - start + 1);
  s.pending.erase(0, start);
  if (!s.pending.empty() && (flush || s.pending.size() >= kMaxLineBytes)) {
    text += s.prefix + s.pending + '\n';
    s.pending.clear();
  }
  write_all(s.dest_fd, text);  // one rank's lines in one write, so ranks never interleave mid-line
}

// Reads what the pipe holds: one read() per wake-up, so a chatty rank cannot starve the others, or
// until it is empty when `drain`. Prints the complete lines. At end of file flushes and closes.
void read_stream(Stream& s, bool drain) {
  char buf[64 * 1024];
  bool eof = false;
  for (;;) {
    const ssize_t n = read(s.fd, buf, sizeof buf);
    if (n > 0) {
      s.pending.append(buf, static_cast<size_t>(n));
      if (drain) continue;
      break;
    }
    if (n < 0 && errno == EINTR) continue;
    eof = !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));  // 0 is end of file; other errors end it too
    break;
  }
  emit_lines(s, /*flush=*/eof || drain);
  if (eof || drain) {
    close(s.fd);
    s.fd = -1;
  }
}

std::string describe_exit(const Rank& r, const siginfo_t& info) {
  std::string text = "rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ")";
  if (info.si_code == CLD_EXITED) return text + " exited with status " + std::to_string(info.si_status);
  text += " was killed by signal " + std::to_string(info.si_status) + " (" + strsignal(info.si_status) + ")";
  return info.si_code == CLD_DUMPED ? text + ", core dumped" : text;
}

// --- the job -------------------------------------------------------------------------------------------

class Job {
 public:
  explicit Job(Options opt) : opt_(std::move(opt)) {}

  int run() {
    setup_signals();
    const std::vector<std::string> env = shared_environment();
    try {
      for (int local = 0; local < opt_.nproc_per_node && !stopping_; ++local) start_rank(local, env);
      loop();
    } catch (...) {
      // ringrun itself failed (out of file descriptors, say): leave no rank behind, then report.
      begin_stop(1, SIGKILL);
      finish();
      throw;
    }
    return finish();
  }

 private:
  // ringrun's environment without the variables it sets itself, plus the ones all ranks share.
  std::vector<std::string> shared_environment() {
    const char* ours[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=",
                          "RINGGRAD_JOB_TOKEN="};
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      bool set_by_us = false;
      for (const char* name : ours) set_by_us = set_by_us || std::strncmp(*e, name, std::strlen(name)) == 0;
      if (!set_by_us) env.emplace_back(*e);
    }
    const int port = opt_.master_port == 0 ? pick_free_port(opt_.master_addr) : opt_.master_port;
    env.push_back("WORLD_SIZE=" + std::to_string(opt_.nnodes * opt_.nproc_per_node));
    env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(opt_.nproc_per_node));
    env.push_back("MASTER_ADDR=" + opt_.master_addr);
    env.push_back("MASTER_PORT=" + std::to_string(port));
    const char* inherited = std::getenv("RINGGRAD_JOB_TOKEN");
    if (inherited != nullptr && *inherited != '\0') {
      env.push_back(std::string("RINGGRAD_JOB_TOKEN=") + inherited);
    } else if (opt_.nnodes == 1) {
      env.push_back("RINGGRAD_JOB_TOKEN=" + make_job_token());
    } else {
      // A token made here would differ from the other nodes' and lock them out of each other.
      std::fprintf(stderr,
                   "ringrun: note: RINGGRAD_JOB_TOKEN is not set, so this %d-node job runs without a job token; "
                   "export the same token on every node (e.g. from `openssl rand -hex 16`) to keep stray "
                   "processes out\n",
                   opt_.nnodes);
    }
    return env;
  }

  void setup_signals() {
    int wake[2];
    make_pipe(wake);
    set_nonblocking(wake[0]);
    set_nonblocking(wake[1]);
    wake_read_fd_ = wake[0];
    g_wake_write_fd = wake[1];
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int signo : kForwardedSignals) sigaction(signo, &sa, nullptr);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;  // exits wake us, a rank stopped by a debugger does not
    sigaction(SIGCHLD, &sa, nullptr);
    // A reader of our output that goes away must not kill ringrun and orphan the ranks.
    signal(SIGPIPE, SIG_IGN);
  }

  void start_rank(int local, std::vector<std::string> env) {
    Rank r;
    r.rank = opt_.node_rank * opt_.nproc_per_node + local;
    env.push_back("RANK=" + std::to_string(r.rank));
    env.push_back("LOCAL_RANK=" + std::to_string(local));
    std::vector<char*> envp, argv;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    for (std::string& a : opt_.command) argv.push_back(a.data());
    argv.push_back(nullptr);

    int out_pipe[2], err_pipe[2];
    make_pipe(out_pipe);
    try {
      make_pipe(err_pipe);
    } catch (...) {
      close(out_pipe[0]);
      close(out_pipe[1]);
      throw;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setpgroup(&attr, 0);  // the rank leads a new group: see the top of the file
    // exec resets caught signals to their default but keeps ignored ones ignored: SIGPIPE, ignored
    // here, must be the default again in the rank.
    sigset_t defaults, empty;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigemptyset(&empty);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, &empty);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    // posix_spawnp searches PATH like execvp, and reports a failed exec through its return value.
    const int rc = posix_spawnp(&r.pid, argv[0], &actions, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(out_pipe[1]);  // the rank holds the write ends now; ours would keep end-of-file away
    close(err_pipe[1]);
    if (rc != 0) {
      close(out_pipe[0]);
      close(err_pipe[0]);
      std::fprintf(stderr, "ringrun: cannot start rank %d: '%s': %s\n", r.rank, argv[0], std::strerror(rc));
      begin_stop(127, SIGTERM);
      return;
    }
    const std::string prefix = "[rank " + std::to_string(r.rank) + "] ";
    r.out = Stream{out_pipe[0], 1, prefix, {}};
    r.err = Stream{err_pipe[0], 2, prefix, {}};
    set_nonblocking(r.out.fd);
    set_nonblocking(r.err.fd);
    ranks_.push_back(std::move(r));
  }

  // Sends signo to every rank's process group -- exited ranks' too, for helpers they left behind.
  void signal_groups(int signo) {
    for (const Rank& r : ranks_) kill(-r.pid, signo);
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
    for (const Rank& r : ranks_)
      if (!r.exited) return false;
    return true;
  }

  void loop() {
    while (!all_exited()) {
      std::vector<pollfd> fds{{wake_read_fd_, POLLIN, 0}};
      std::vector<Stream*> streams{nullptr};
      for (Rank& r : ranks_)
        for (Stream* s : {&r.out, &r.err})
          if (s->fd >= 0) {
            fds.push_back({s->fd, POLLIN, 0});
            streams.push_back(s);
          }
      int timeout_ms = -1;
      if (kill_at_) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at_ - Clock::now());
        timeout_ms = static_cast<int>(std::max<long long>(0, left.count() + 1));
      }
      if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR)
        throw std::runtime_error("poll failed: " + errno_text());

      if (fds[0].revents & POLLIN) handle_signals();
      for (size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
          read_stream(*streams[i], /*drain=*/false);
      collect_exits();
      if (kill_at_ && Clock::now() >= *kill_at_) {
        for (const Rank& r : ranks_)
          if (!r.exited)
            std::fprintf(stderr,
                         "ringrun: rank %d (pid %d) still running %d ms after it was told to stop; "
                         "sending SIGKILL\n",
                         r.rank, static_cast<int>(r.pid), opt_.grace_ms);
        signal_groups(SIGKILL);
        kill_at_.reset();
      }
    }
  }

  void handle_signals() {
    unsigned char signos[64];
    ssize_t n;
    while ((n = read(wake_read_fd_, signos, sizeof signos)) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        const int signo = signos[i];
        if (signo == SIGCHLD) continue;  // collect_exits runs after every wake-up anyway
        std::fprintf(stderr, "ringrun: got %s; forwarding it to every rank\n", signal_name(signo));
        begin_stop(128 + signo, signo);  // a second Ctrl-C is forwarded too, but keeps the first status
      }
    }
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
      // writes later is not waited for, or ringrun could hang on a daemon.
      for (Stream* s : {&r.out, &r.err})
        if (s->fd >= 0) read_stream(*s, /*drain=*/true);
      const bool failed = info.si_code != CLD_EXITED || info.si_status != 0;
      if (failed && !stopping_) {
        std::fprintf(stderr, "ringrun: %s%s\n", describe_exit(r, info).c_str(),
                     ranks_.size() > 1 ? "; stopping the other ranks" : "");
        begin_stop(info.si_code == CLD_EXITED ? info.si_status : 128 + info.si_status, SIGTERM);
      }
    }
  }

  int finish() {
    if (stopping_) signal_groups(SIGKILL);  // helpers that outlived their rank
    for (const Rank& r : ranks_) {
      int status;
      while (waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    return exit_code_;
  }

  Options opt_;
  std::vector<Rank> ranks_;
  int wake_read_fd_ = -1;
  bool stopping_ = false;
  int exit_code_ = 0;
  std::optional<Clock::time_point> kill_at_;  // when the ranks still running get SIGKILL
};

// posix_spawn's dup2 onto fd 1 or 2 would misbehave if a pipe got that number, which happens when
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
  Options opt;
  try {
    opt = parse_args(argc, argv);
  } catch (const HelpRequested&) {
    std::fputs(kUsage, stdout);
    std::fputs("\n", stdout);
    std::fputs(kHelp, stdout);
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ringrun: %s\n%s", e.message.c_str(), kUsage);
    return 2;
  }
  try {
    return Job(std::move(opt)).run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringrun: %s\n", e.what());
    return 1;
  }
}
