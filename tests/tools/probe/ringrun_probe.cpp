// tests/tools/probe/ringrun_probe.cpp: the program tests/tools/test_ringrun.cpp runs under ringrun.
//
// It first prints one line on stdout with what ringrun gave it:
//   env RANK=1 WORLD_SIZE=3 LOCAL_RANK=1 LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500
//       TOKEN=<token> LAUNCHER=ringrun PID=1234          (all on one line; LAUNCHER: RINGGRAD_LAUNCHER)
// (a variable that is not set reads "<unset>"), then runs its arguments as a list of steps, in
// order. A step written `name@R` runs on rank R only; the others skip it (and its argument).
//   out TEXT        TEXT and a newline on stdout, in one write
//   err TEXT        TEXT and a newline on stderr
//   partial TEXT    TEXT on stdout, with no newline
//   sleep MS        sleeps MS milliseconds
//   exit CODE       exits with CODE
//   kill SIG        sends itself signal SIG
//   ignore-term     ignores SIGTERM from now on
//   signals         prints which signals it ignores and blocks (signal_report.h)
//   catch-usr1      from now on prints "caught SIGUSR1" on stdout for each SIGUSR1 (a sleep goes on)
//   spawn-sleep MS  forks a child that prints "grandchild PID=<pid>" and sleeps MS; waits for it
//   err-pid         "pid PID=<pid>" on stderr, for a test that does not read stdout
//   tick MS         "tick <n>" on stdout every 50 ms (n = 0, 1, ...) for MS milliseconds
//   flood BYTES     BYTES of numbered 100-byte lines on stdout, "flood <n> xxx...", about 64 KiB a write
// Output goes through write(), not stdio: a buffered line would be lost by `kill` or `exit`.
// It never dumps core: a test sends the job SIGQUIT.
#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "signal_report.h"

namespace {

void say(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string env_or_unset(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "<unset>";
}

void sleep_ms(long ms) {
  timespec left{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

// Lines of exactly 100 bytes, "flood 0000042 xxx...\n", so that a test can count the ones it got.
void flood(long bytes) {
  std::string batch;
  for (long n = 0; n * 100 < bytes; ++n) {
    char head[32];
    std::snprintf(head, sizeof head, "flood %07ld ", n);
    batch += head;
    batch.append(100 - 1 - batch.size() % 100, 'x');
    batch += '\n';
    if (batch.size() >= 64 * 1024) {
      say(1, batch);
      batch.clear();
    }
  }
  say(1, batch);
}

extern "C" void on_usr1(int) {
  static const char kText[] = "caught SIGUSR1\n";
  const ssize_t ignored = write(1, kText, sizeof kText - 1);
  (void)ignored;
}

[[noreturn]] void usage_error(const std::string& what) {
  say(2, "ringrun_probe: " + what + "\n");
  std::exit(64);
}

}  // namespace

int main(int argc, char** argv) {
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  say(1, "env RANK=" + env_or_unset("RANK") + " WORLD_SIZE=" + env_or_unset("WORLD_SIZE") +
             " LOCAL_RANK=" + env_or_unset("LOCAL_RANK") + " LOCAL_WORLD_SIZE=" + env_or_unset("LOCAL_WORLD_SIZE") +
             " MASTER_ADDR=" + env_or_unset("MASTER_ADDR") + " MASTER_PORT=" + env_or_unset("MASTER_PORT") +
             " TOKEN=" + env_or_unset("RINGGRAD_JOB_TOKEN") + " LAUNCHER=" + env_or_unset("RINGGRAD_LAUNCHER") +
             " PID=" + std::to_string(getpid()) + "\n");
  const char* rank_text = std::getenv("RANK");
  const int rank = rank_text != nullptr ? std::atoi(rank_text) : -1;

  for (int i = 1; i < argc; ++i) {
    std::string step = argv[i];
    bool mine = true;
    const size_t at = step.find('@');
    if (at != std::string::npos) {
      mine = std::atoi(step.c_str() + at + 1) == rank;
      step.resize(at);
    }
    if (step == "ignore-term") {
      if (mine) signal(SIGTERM, SIG_IGN);
      continue;
    }
    if (step == "signals") {
      if (mine) say(1, probe::signal_report());
      continue;
    }
    if (step == "err-pid") {
      if (mine) say(2, "pid PID=" + std::to_string(getpid()) + "\n");
      continue;
    }
    if (step == "catch-usr1") {
      if (mine) {
        struct sigaction sa {};
        sa.sa_handler = on_usr1;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGUSR1, &sa, nullptr);
      }
      continue;
    }
    if (i + 1 >= argc) usage_error("step '" + step + "' expects an argument, got none");
    const std::string arg = argv[++i];
    if (!mine) continue;
    if (step == "out") {
      say(1, arg + "\n");
    } else if (step == "err") {
      say(2, arg + "\n");
    } else if (step == "partial") {
      say(1, arg);
    } else if (step == "sleep") {
      sleep_ms(std::atol(arg.c_str()));
    } else if (step == "exit") {
      std::exit(std::atoi(arg.c_str()));
    } else if (step == "kill") {
      kill(getpid(), std::atoi(arg.c_str()));
      sleep_ms(10000);  // a blocked or ignored signal would otherwise let the probe carry on silently
    } else if (step == "tick") {
      const long ms = std::atol(arg.c_str());
      for (long n = 0; n * 50 < ms; ++n) {
        say(1, "tick " + std::to_string(n) + "\n");
        sleep_ms(50);
      }
    } else if (step == "flood") {
      flood(std::atol(arg.c_str()));
    } else if (step == "spawn-sleep") {
      const pid_t child = fork();
      if (child < 0) usage_error("fork failed");
      if (child == 0) {
        say(1, "grandchild PID=" + std::to_string(getpid()) + "\n");
        sleep_ms(std::atol(arg.c_str()));
        _exit(0);
      }
      int status;
      while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
    } else {
      usage_error("unknown step '" + step + "'");
    }
  }
  return 0;
}
