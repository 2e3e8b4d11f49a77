// tools/launch/job_environment.cpp: see job_environment.h.
#include "tools/launch/job_environment.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace ringgrad::launch {

namespace {

std::string name_of(const std::string& entry) { return entry.substr(0, entry.find('=')); }

}  // namespace

std::vector<std::string> shared_environment(const JobOptions& options) {
  // getenv returns the first match, so an inherited WORLD_SIZE=3 left in place would win over ours.
  std::vector<std::string> ours = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",         "LOCAL_WORLD_SIZE",
                                   "MASTER_ADDR", "MASTER_PORT", "RINGGRAD_JOB_TOKEN", "RINGGRAD_LAUNCHER"};
  for (const std::string& e : options.extra_env) ours.push_back(name_of(e));
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string name = name_of(*e);
    bool set_by_us = false;
    for (const std::string& o : ours) set_by_us = set_by_us || o == name;
    if (!set_by_us) env.emplace_back(*e);
  }
  const int port = options.master_port == 0 ? pick_free_port(options.master_addr) : options.master_port;
  env.push_back("WORLD_SIZE=" + std::to_string(options.nnodes * options.nproc_per_node));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(options.nproc_per_node));
  env.push_back("MASTER_ADDR=" + options.master_addr);
  env.push_back("MASTER_PORT=" + std::to_string(port));
  env.push_back("RINGGRAD_LAUNCHER=" + options.name);
  const char* inherited = std::getenv("RINGGRAD_JOB_TOKEN");
  if (inherited != nullptr && *inherited != '\0') {
    env.push_back(std::string("RINGGRAD_JOB_TOKEN=") + inherited);
  } else if (options.nnodes == 1) {
    env.push_back("RINGGRAD_JOB_TOKEN=" + make_job_token());
  } else {
    // A token made here would differ from the other nodes' and lock them out of each other.
    std::fprintf(stderr,
                 "%s: note: RINGGRAD_JOB_TOKEN is not set, so this %d-node job runs without a job token; "
                 "export the same token on every node (e.g. from `openssl rand -hex 16`) to keep stray "
                 "processes out\n",
                 options.name.c_str(), options.nnodes);
  }
  env.insert(env.end(), options.extra_env.begin(), options.extra_env.end());
  return env;
}

// Rank 0's store binds the port a moment later; another process could take it in between, and
// rank 0 would then report that its bind failed -- rare enough for a convenience.
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
      why = std::strerror(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
      port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    else
      why = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  if (port < 0) throw std::runtime_error("--master-port 0: cannot bind a port on " + addr + ": " + why);
  return port;
}

std::string make_job_token() {
  unsigned char bytes[16];
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error(std::string("cannot open /dev/urandom for the job token: ") + std::strerror(errno));
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

}  // namespace ringgrad::launch
