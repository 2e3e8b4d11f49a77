// parallel/ring/tcp_link.h: the ring over TCP -- works between machines.
//
// Each rank listens on an ephemeral port of the interface that reaches MASTER_ADDR, publishes
// "address:port" in the store, connects to the next rank and accepts the previous one. The two
// connections are separate, so sending forward and receiving from behind never wait for each
// other (with two ranks, next and previous are the same process, over two connections).
// TCP_NODELAY keeps small messages from waiting for Nagle's timer; 4 MiB socket buffers keep a
// large transfer streaming while the receiver is busy reducing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/ring/link.h"
#include "parallel/socket.h"
#include <ringgrad/parallel/store.h>

namespace ringgrad {
namespace parallel {

class TcpLink final : public RingLink {
 public:
  // Rendezvous through the store; every rank of the group calls it at the same time.
  TcpLink(Store& store, int rank, int size, const std::string& master_addr, Deadline deadline);
  const char* name() const override { return "tcp"; }
  void exchange(uint64_t send_tag, const void* send, size_t send_bytes, uint64_t recv_tag, void* recv_into,
                size_t recv_bytes, const OnReceived& on_received, Deadline deadline) override;
  void abort(const std::string& reason) override;

 private:
  int rank_, next_rank_, prev_rank_;
  std::string next_host_, prev_host_;  // the neighbours' addresses, for messages
  Socket to_next_, from_prev_;
  std::vector<uint8_t> scratch_;  // received pieces when the caller gives no destination
  bool send_at_boundary_ = true;  // the stream to next_rank_ is between two messages
};

// The local address this host uses to reach `host` (the interface a peer can reach us on).
std::string local_address_towards(const std::string& host);

}  // namespace parallel
}  // namespace ringgrad
