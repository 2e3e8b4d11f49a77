// tests/fuzz/fuzz_store.cpp: libFuzzer target for the TCPStore server's wire protocol.
//
// One TCPStore server runs in this process (port 0: a free port). Each input is sent as raw bytes
// on a fresh connection over 127.0.0.1, as a hostile or broken client would: the harness reads
// what comes back until the server has been quiet for a few milliseconds (a held get or wait
// legitimately answers nothing), then half-closes, drains until EOF or a short timeout, and
// closes. The server must never crash (a sanitizer report here), never hang and keep serving: every
// kCheckEvery inputs a real client set/get must still work within its timeout, or the harness
// aborts. tests/fuzz/README.md says how to run it longer.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include <ringgrad/parallel/store.h>

namespace {

using ringgrad::parallel::TCPStore;
using ringgrad::parallel::TCPStoreOptions;

constexpr int kQuietMs = 5;      // no reply bytes for this long: the server has answered what it will
constexpr int kDrainMs = 200;    // after the half-close, the server must close within this
constexpr int kCheckEvery = 64;  // inputs between two liveness checks

TCPStore& server() {
  static TCPStore* store = [] {
    auto* s = new TCPStore(TCPStoreOptions().is_server(true).port(0).timeout(std::chrono::seconds(5)));
    s->set_timeout(std::chrono::seconds(5));  // the liveness check's get: a hang past this is a bug
    return s;
  }();  // never destroyed: libFuzzer exits from anywhere
  return *store;
}

// Reads whatever arrives until `quiet_ms` pass with nothing, or EOF; true on EOF.
bool read_until_quiet(int fd, int quiet_ms) {
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, quiet_ms);
    if (ready <= 0) return false;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;  // EOF, or the server reset the connection
  }
}

void check_alive(uint64_t iteration) {
  try {
    const std::string value = "alive " + std::to_string(iteration);
    server().set("fuzz_store.alive", value);
    if (server().get_string("fuzz_store.alive") != value) {
      std::fprintf(stderr, "fuzz_store: the server answered a get with another value than was set\n");
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_store: the server stopped serving a real client: %s\n", e.what());
    std::abort();
  }
}

// A connect() that a signal interrupted (libFuzzer's SIGALRM, which checks for slow inputs every
// second) goes on in the background: wait until the socket is writable, then ask how it ended.
bool connect_finishes(int fd) {
  if (errno != EINTR) return false;
  pollfd p{fd, POLLOUT, 0};
  while (::poll(&p, 1, 5000) < 0)
    if (errno != EINTR) return false;
  int error = 0;
  socklen_t length = sizeof error;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return false;
  errno = error;
  return error == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint64_t iteration = 0;
  TCPStore& store = server();
  if (iteration++ % kCheckEvery == 0) check_alive(iteration);

  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) std::abort();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(store.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && !connect_finishes(fd)) {
    std::perror("fuzz_store: connect to the server");
    std::abort();
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  bool closed = false;
  for (size_t sent = 0; sent < size && !closed;) {
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      closed = read_until_quiet(fd, kQuietMs);  // the server replies while we send: make room
    } else {
      closed = true;  // the server closed a malformed connection: fine
    }
  }
  if (!closed) closed = read_until_quiet(fd, kQuietMs);
  if (!closed) {
    ::shutdown(fd, SHUT_WR);
    read_until_quiet(fd, kDrainMs);
  }
  ::close(fd);
  return 0;
}
