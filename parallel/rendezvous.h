/// @file
/// parallel/rendezvous.h: the first step of every job -- all ranks meet at rank 0's store.
///
/// Before any link is built, each rank announces itself under its own key and waits until every rank
/// has. This is where a job stalls when a rank was never started, crashed during import, or points at
/// another MASTER_ADDR/MASTER_PORT, so the wait speaks: at a slow rhythm it says how many ranks
/// joined and which are still awaited, and at the deadline it fails naming them.
#pragma once

#include <chrono>
#include <string>

#include <ringgrad/parallel/store.h>

namespace ringgrad {
namespace parallel {

/// Who is meeting: this process's rank and the job it belongs to.
struct RendezvousInfo {
  ///@{
  /// this process's rank, and how many ranks must join
  int rank = 0, world_size = 1;
  ///@}
  std::string store_address;  ///< "host:port", for messages
  std::string job_id;         ///< the launcher's id of this job, "" when unknown (LaunchInfo::job_id)
};

/// Checks that the store belongs to this job, claims `me.rank` (a second process with the same rank
/// fails at once), and waits until all ranks have joined, for at most `timeout`. Progress lines go to
/// stderr ("rendezvous: 1 of 2 ranks joined; waiting for rank 1 at 127.0.0.1:29500"). Throws naming
/// the missing ranks when the timeout passes.
void rendezvous(Store& store, const RendezvousInfo& me, std::chrono::milliseconds timeout);

}  // namespace parallel
}  // namespace ringgrad
