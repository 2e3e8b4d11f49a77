// parallel/ring/ring_process_group.h: ProcessGroup backend "ring" -- the hand-written ring.
//
// Collectives are checked on the caller's thread (collective_args.h), then run one after another on
// the group's communication thread (collective_queue.h, which also says what a Work means). A
// collective that fails (a peer died, the deadline passed, ranks disagree) marks its Work with the
// error, tells the neighbours, and leaves the group broken.
//
// Across hosts with the same number (>= 2) of ranks each, all_reduce is hierarchical by default
// (hierarchical.h): the group then connects two more rings besides the job's -- one inside this
// host, one across the hosts -- and the other collectives keep the job's ring.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ringgrad/core/base/arg.h>
#include <ringgrad/parallel/process_group.h>
#include "parallel/collective_args.h"
#include "parallel/collective_queue.h"
#include "parallel/ring/link.h"

namespace ringgrad {
namespace parallel {

/// The ring backend's settings; init_process_group fills them from InitOptions.
struct RingOptions {
  RINGGRAD_ARG(std::chrono::milliseconds, timeout){300000};  ///< each collective
  RINGGRAD_ARG(std::string, transport) = "auto";             ///< "auto", "tcp" or "shm"
  RINGGRAD_ARG(std::string, master_addr) = "127.0.0.1";      ///< where rank 0's store is, for the TCP links' addresses
  RINGGRAD_ARG(std::chrono::milliseconds, setup_timeout){60000};  ///< connecting the ring
  /// all_reduce: "auto" (hierarchical across hosts of equal rank counts, else flat), "flat" or
  /// "hierarchical" (hierarchical.h). Empty: RINGGRAD_RING_ALGORITHM, else "auto".
  RINGGRAD_ARG(std::string, algorithm);
};

class RingProcessGroup final : public ProcessGroup {
 public:
  // Rendezvous through `store` (null only for a group of one) and connect the ring.
  RingProcessGroup(std::shared_ptr<Store> store, int rank, int size, const RingOptions& options = {});
  ~RingProcessGroup() override;  // finishes the queued collectives, then stops the thread

  const char* backend_name() const override { return "ring"; }
  Device collective_device(Device) const override { return Device::cpu(); }  // works on host memory
  // "shm", "tcp", "shm+tcp" (one link each way: this rank is at the end of its host's stretch of
  // the ring), or "none" for a group of one.
  const char* transport_name() const;
  // all_reduce's algorithm: "hierarchical" or "flat" (also for a group of one).
  const char* algorithm_name() const { return local_link_ ? "hierarchical" : "flat"; }
  // The ranks in ring order: host by host (ring_order.h); 0, 1, ..., N-1 when on one host.
  const std::vector<int>& ring_order() const { return order_; }

  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(const Tensor& tensor, int root) override;
  std::shared_ptr<Work> all_gather(const std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                       ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> barrier() override;

 private:
  std::string first_failure(const std::string& mine);
  void wait_for_failure_reports();

  void abort_links(const std::string& reason);
  // queue_->enqueue, with the start of each collective marked for the links (link.h).
  std::shared_ptr<Work> enqueue(std::string description, std::function<void(const CollectiveRun&)> job);

  std::shared_ptr<Store> store_;
  std::unique_ptr<RingLink> link_;
  // A hierarchical all_reduce's rings: this host's ranks, and the ranks at this rank's place within
  // their hosts; null when all_reduce is flat.
  std::unique_ptr<RingLink> local_link_, across_link_;
  int local_position_ = 0, local_size_ = 1, across_position_ = 0, across_size_ = 1;
  std::string transport_name_ = "none";
  std::string where_;             // " at 10.0.0.2" when the job spans hosts, for messages
  std::vector<int> order_;        // position -> rank
  std::vector<int> position_of_;  // rank -> position
  int position_ = 0;              // this rank's
  CollectiveArgs args_;
  std::unique_ptr<CollectiveQueue> queue_;  // made last: its thread uses the links
};

}  // namespace parallel
}  // namespace ringgrad
