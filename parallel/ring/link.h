// parallel/ring/link.h: what the ring algorithms need from a transport.
//
// In a ring every rank talks to exactly two others: it sends to the next rank, (rank + 1) % N, and
// receives from the previous one, (rank - 1 + N) % N. Every step of every ring algorithm is the same
// move -- send one block forward while receiving one block from behind -- so a transport only has to
// do that one thing well: exchange(). Sending and receiving progress at the same time (full duplex),
// and received data is handed to the algorithm piece by piece as it arrives, so reducing the first
// piece overlaps receiving the next.
//
// Each message carries a tag (collective number and step) and its length; the receiver checks both,
// so ranks that disagree on the order or the sizes of their collectives get an error naming the rank
// and both values instead of silently mixing data or waiting until the timeout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "parallel/socket.h"

namespace ringgrad {
namespace parallel {

class RingLink {
 public:
  virtual ~RingLink() = default;
  virtual const char* name() const = 0;  // "tcp" or "shm"

  // Called for each received piece, in order: `data` holds bytes [offset, offset + bytes) of the
  // message and stays valid only during the call.
  using OnReceived = std::function<void(const uint8_t* data, size_t offset, size_t bytes)>;

  // Sends send_bytes from `send` to the next rank while receiving recv_bytes from the previous one.
  // Received bytes land in `recv_into` when it is not null (then on_received, if any, sees them
  // there); otherwise they stay in the transport's own buffer and on_received must consume them.
  // The outgoing message is labelled send_tag; the incoming one must carry recv_tag (in a ring
  // step both are the step's tag). A side with 0 bytes is skipped: both ranks compute the same sizes.
  // Throws ringgrad::Error naming the peer rank on a deadline, a dead or aborted peer, or a
  // tag/length mismatch.
  virtual void exchange(uint64_t send_tag, const void* send, size_t send_bytes, uint64_t recv_tag, void* recv_into,
                        size_t recv_bytes, const OnReceived& on_received, Deadline deadline) = 0;

  // After a failure: tell the neighbours (so they fail at once instead of at their deadline).
  virtual void abort(const std::string& reason) = 0;
};

// "collective #12 (all_reduce), step 3": the tag written for humans.
std::string describe_tag(uint64_t tag);
inline uint64_t make_tag(uint64_t collective, uint32_t step) { return (collective << 20) | step; }

}  // namespace parallel
}  // namespace ringgrad
