// parallel/store_server.h: TCPStore's server -- one thread, one poll() loop, every connection.
// PRIVATE to the library (parallel/store.h is the public API): TCPStore on rank 0 owns one.
//
// Declared in a header of its own only because the client (store_client.cpp) owns the server it
// starts; everything the server does is in store_server.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "parallel/socket.h"
#include <ringgrad/parallel/store.h>
#include "parallel/store_protocol.h"

namespace ringgrad {
namespace parallel {

// One client connection, as the server sees it.
struct Connection {
  explicit Connection(Socket s) : socket(std::move(s)) {}
  Socket socket;
  bool authenticated = false;  // has presented the job token, or none is required
  bool dead = false;           // closed at the end of this poll round
  // The client shut its sending side (or its connection broke): what it sent is still served, and
  // the connection closes once nothing is held or left to send.
  bool read_closed = false;
  std::vector<uint8_t> in;   // received, not yet parsed
  std::vector<uint8_t> out;  // the reply being sent
  size_t out_sent = 0;
  // A get or wait that cannot be answered yet. It is listed in the server's waiters under
  // `waiting_on`, one of its missing keys, and answered when that key is set or `deadline` passes.
  std::optional<Request> held;
  std::string waiting_on;
  Clock::time_point deadline;  // of the held request, or of the token handshake
};

class StoreServer {
 public:
  explicit StoreServer(const TCPStoreOptions& options);
  ~StoreServer();  // wakes the loop, waits for the thread, closes every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const { return listener_.port(); }
  // Connections closed so far for a wrong job token, and for presenting none within the handshake
  // limit (a stopped client, a port scanner): a rendezvous that times out says so.
  int64_t refused_token() const { return refused_token_.load(); }
  int64_t refused_silent() const { return refused_silent_.load(); }
  // As of the end of the server's last poll round: the connections it holds, and the bytes their
  // buffers keep allocated (for tests: closed connections must leave nothing behind).
  int64_t connections() const { return connections_.load(); }
  int64_t buffered_bytes() const { return buffered_bytes_.load(); }

 private:
  using ConnId = uint64_t;  // never reused, unlike fds, so a stale waiter entry cannot hit a newcomer

  void run();
  int next_timeout_ms() const;
  void accept_all();
  void handle(ConnId id, short revents);
  void receive(Connection& c);
  void flush(Connection& c);
  bool authenticate(Connection& c);
  void serve(ConnId id, Connection& c);
  void execute(ConnId id, Connection& c, Request req);
  void add(Connection& c, const std::string& key, int64_t delta);
  void hold(ConnId id, Connection& c, Request req);
  void try_release(ConnId id, Connection& c);
  void wake_waiters(const std::string& key);
  void expire_deadlines();
  void unlist(ConnId id, Connection& c);
  void close_dead();
  void count_memory();
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;

  Listener listener_;
  std::string token_;
  int64_t max_value_bytes_;
  int wake_fd_ = -1;                                           // the destructor writes here to wake poll()
  std::atomic<int64_t> refused_token_{0}, refused_silent_{0};  // written by the server thread only
  std::atomic<int64_t> connections_{0}, buffered_bytes_{0};    // likewise
  bool accept_failure_reported_ = false;

  // Touched by the server thread only, so they need no lock.
  std::unordered_map<std::string, std::vector<uint8_t>> data_;
  std::map<ConnId, Connection> conns_;
  std::unordered_map<std::string, std::vector<ConnId>> waiters_;  // key -> connections held on it
  ConnId next_id_ = 0;
  std::vector<uint8_t> read_buffer_;  // receive() reads into it, then copies what came to c.in

  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace parallel
}  // namespace ringgrad
