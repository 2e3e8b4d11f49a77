// tools/launch/signal_scope.cpp: see signal_scope.h.
#include "tools/launch/signal_scope.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ringgrad::launch {

namespace {

int g_wake_write_fd = -1;

extern "C" void on_signal(int signo) {
  const int saved_errno = errno;  // the interrupted code may be about to read errno
  const unsigned char byte = static_cast<unsigned char>(signo);
  // Non-blocking: if the pipe is full, the loop has plenty of wake-ups pending already.
  const ssize_t ignored = write(g_wake_write_fd, &byte, 1);
  (void)ignored;
  errno = saved_errno;
}

}  // namespace

SignalScope::SignalScope() {
  // Close-on-exec: no rank inherits it. Non-blocking: see on_signal.
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
  read_fd_ = wake[0];
  g_wake_write_fd = wake[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigset_t caught;
  sigemptyset(&caught);
  for (size_t i = 0; i < kHandledCount; ++i) {
    const int signo = kHandledSignals[i].signo;
    sigaction(signo, nullptr, &saved_[i]);
    if (!(saved_[i].sa_flags & SA_SIGINFO) && saved_[i].sa_handler == SIG_IGN) continue;
    // Not restarted after SIGTTIN and SIGTTOU: the kernel answers a background process's read or
    // write of the terminal with that signal and restarts the call after the handler -- which
    // gets the signal again, forever. Interrupted, the call returns EINTR and the loop stops the job.
    sa.sa_flags = signo == SIGTTIN || signo == SIGTTOU ? 0 : SA_RESTART;
    sigaction(signo, &sa, nullptr);
    sigaddset(&caught, signo);
  }
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;  // exits wake us; a rank that stops (Ctrl-Z, a debugger) not
  sigaction(SIGCHLD, &sa, &saved_chld_);
  sigaddset(&caught, SIGCHLD);
  // A reader of our output that goes away must not kill the launcher and orphan the ranks.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &saved_pipe_);
  // pthread_sigmask, not sigprocmask: a benchmark may have started threads already.
  pthread_sigmask(SIG_UNBLOCK, &caught, &caller_mask_);
}

SignalScope::~SignalScope() {
  pthread_sigmask(SIG_SETMASK, &caller_mask_, nullptr);  // first: what arrives now waits for the caller
  for (size_t i = 0; i < kHandledCount; ++i) sigaction(kHandledSignals[i].signo, &saved_[i], nullptr);
  sigaction(SIGCHLD, &saved_chld_, nullptr);
  sigaction(SIGPIPE, &saved_pipe_, nullptr);
  close(g_wake_write_fd);
  g_wake_write_fd = -1;
  close(read_fd_);
}

}  // namespace ringgrad::launch
