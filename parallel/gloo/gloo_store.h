// parallel/gloo/gloo_store.h: ringgrad's Store as a gloo::rendezvous::Store, for Gloo's setup.
//
// Gloo's ranks meet through a store: each publishes the addresses of its listening sockets under
// its rank number ("0", "1", ...) and reads the others'. Those keys go into the job's own store
// (rank 0's TCPStore) under "gloo/", next to the rendezvous' and the ring's, so that nothing else
// needs to be served and the names cannot clash.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include <ringgrad/parallel/store.h>

namespace ringgrad {
namespace parallel {

class GlooStore final : public gloo::rendezvous::Store {
 public:
  // `store` must outlive this adapter; every key is prefixed with `prefix`.
  GlooStore(parallel::Store& store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;  // waits for the key, up to the store's timeout
  void wait(const std::vector<std::string>& keys) override;
  // Throws ringgrad::Error naming the keys still missing when `timeout` passes.
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const;
  parallel::Store& store_;
  std::string prefix_;
};

}  // namespace parallel
}  // namespace ringgrad
