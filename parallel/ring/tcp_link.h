// parallel/ring/tcp_link.h: the ring's halves over TCP -- neighbours on other hosts.
//
// The receiving half listens on an ephemeral port of the interface that reaches MASTER_ADDR and
// publishes "address:port pid host" in the store; the sending half connects to the next rank's and
// presents the job token, its rank, pid and host; the receiving half accepts the previous rank's
// connection and checks token and rank. (The pid and host let a timeout say that a neighbour on this
// host is stopped.) The two connections are separate, so sending forward and receiving from behind
// never wait for each other (with two ranks, next and previous are the same process, over two
// connections). TCP_NODELAY keeps small messages from waiting for Nagle's timer; 4 MiB socket buffers keep a
// large transfer streaming while the receiver is busy reducing. Every message starts with a header
// (tag, length); a header with the abort tag carries, instead, the reason a neighbour gave up.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/ring/link.h"
#include "parallel/socket.h"
#include <ringgrad/parallel/store.h>

namespace ringgrad {
namespace parallel {

// Every message starts with this header, so the receiver can check it belongs to the step it is in.
struct TcpMessageHeader {
  uint64_t tag;
  uint64_t bytes;
};

class TcpRecv final : public RecvHalf {
 public:
  // Listens, and publishes where under `keys` (RingNeighbours::keys), for the previous rank.
  TcpRecv(Store& store, const std::string& keys, int rank, int prev, const std::string& master_addr);
  const char* name() const override { return "tcp"; }
  void begin(uint64_t tag, void* into, size_t bytes, const OnReceived* on_received) override;
  bool progress() override;
  bool done() const override { return received_ == total_; }
  int poll_fd() const override { return from_prev_.fd(); }
  void check(bool timed_out, bool busy) override;
  void abort(const std::string& reason) override;
  void accept(Deadline deadline) override;  // until the previous rank connects with the job's token

 private:
  int rank_, prev_;
  pid_t prev_pid_ = 0;     // when prev is on this host, else 0
  std::string prev_name_;  // "rank 3 at 10.0.0.2", for messages
  std::string what_;       // "ring: receiving from rank 3 at 10.0.0.2", made once, not per call
  std::string token_;
  std::optional<Listener> listener_;  // until accept()
  Socket from_prev_;
  std::vector<uint8_t> scratch_;  // received pieces when the caller gives no destination
  TcpMessageHeader header_{};
  uint64_t tag_ = 0;
  uint8_t* into_ = nullptr;
  size_t bytes_ = 0, total_ = 0, received_ = 0;  // header + payload
  size_t scratch_fill_ = 0, scratch_offset_ = 0;
  const OnReceived* on_received_ = nullptr;
};

class TcpSend final : public SendHalf {
 public:
  // Connects to next's listener (published under `keys`), as `rank`.
  TcpSend(Store& store, const std::string& keys, int rank, int next, Deadline deadline);
  const char* name() const override { return "tcp"; }
  void begin(uint64_t tag, const void* data, size_t bytes) override;
  bool progress() override;
  bool done() const override { return sent_ == total_; }
  int poll_fd() const override { return to_next_.fd(); }
  void check(bool timed_out, bool busy) override;
  void abort(const std::string& reason) override;

 private:
  std::string next_name_;  // "rank 3 at 10.0.0.2", for messages
  pid_t next_pid_ = 0;     // when next is on this host, else 0
  std::string what_;       // "ring: sending to rank 3 at 10.0.0.2"
  Socket to_next_;
  TcpMessageHeader header_{};
  const uint8_t* data_ = nullptr;
  size_t bytes_ = 0, total_ = 0, sent_ = 0;  // header + payload
};

// The local address this host uses to reach `host` (the interface a peer can reach us on).
std::string local_address_towards(const std::string& host);

}  // namespace parallel
}  // namespace ringgrad
