/// @file
/// parallel/store.h: the key-value store processes meet through, and TCPStore, its TCP server/client.
///
/// Before processes can exchange tensors they must find each other: each needs its neighbours'
/// addresses, NCCL needs one unique id shared by all. The store is a tiny key-value service for
/// that, served by rank 0 (a thread inside rank 0's process) at MASTER_ADDR:MASTER_PORT; every rank,
/// rank 0 included, is a client. Same semantics as PyTorch's c10d TCPStore.
///
/// Wire protocol (one request, one reply, on one TCP connection per client):
/// @code
///   request : u8 command, u32 key count, then per key [u32 length][bytes], then per command payload
///   reply   : u8 status (0 ok, else error), then the command's result
/// @endcode
/// All integers little-endian. Lengths are validated against limits BEFORE anything is allocated:
/// a key over 4 KiB, a value over max_value_bytes, or more than 1024 keys in one request is a protocol
/// error; the server answers nothing, closes that connection and carries on serving the others. A
/// client that half-closes after its last request still gets every reply, then the server closes.
/// The commands and their payloads: store_protocol.h (private, like store_server.h).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ringgrad/core/base/arg.h>

namespace ringgrad {
namespace parallel {

/// A key-value store all ranks of a job share (PyTorch's c10d Store): the meeting point of the
/// rendezvous and of a backend's setup. Values are bytes; every blocking call gives up after timeout().
class Store {
 public:
  virtual ~Store() = default;

  /// Stores value under key (replacing any previous value) and wakes every get/wait on it.
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  /// The value of key, waiting until some client sets it; throws after timeout() naming the key.
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  /// Atomically adds delta to the integer stored at key (0 when absent) and returns the new value.
  /// The integer is stored as its decimal text, as PyTorch does, so get() returns e.g. "3".
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// Waits until every key exists; throws after timeout() naming the keys still missing.
  virtual void wait(const std::vector<std::string>& keys) = 0;
  /// Waits at most `limit` (not timeout()) for every key; returns the keys still missing then, empty
  /// when all exist. Never throws for a timeout: for waits that report progress between rounds.
  virtual std::vector<std::string> wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds limit) = 0;
  /// True when every key exists right now (does not wait).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  /// Removes key; returns whether it existed.
  virtual bool delete_key(const std::string& key) = 0;

  /// Thread-safe. On a thread inside a ScopedStoreTimeout for this store, timeout() is that scope's.
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ms_ = timeout.count(); }
  std::chrono::milliseconds timeout() const;  ///< of every blocking call (default 300 s); see set_timeout

  /// Helpers for text values.
  void set(const std::string& key, const std::string& value) {
    set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  /// get(key) as text.
  std::string get_string(const std::string& key) {
    const std::vector<uint8_t> v = get(key);
    return std::string(v.begin(), v.end());
  }

 private:
  std::atomic<int64_t> timeout_ms_{300000};
};

/// Shortens a store's timeout for one scope, on this thread only. Diagnostics after a failure (who
/// failed first?) must not wait as long as the operation that failed -- the store may be served by
/// the very rank that stopped answering -- while other threads' waits on the same store keep their
/// own timeout. Scopes nest; each ends with its own lifetime.
class ScopedStoreTimeout {
 public:
  /// Until destroyed, store.timeout() on this thread is min(limit, the timeout it had).
  ScopedStoreTimeout(const Store& store, std::chrono::milliseconds limit)
      : store_(&store), limit_(std::min(limit, store.timeout())), outer_(innermost_) {
    innermost_ = this;
  }
  ~ScopedStoreTimeout() { innermost_ = outer_; }
  ScopedStoreTimeout(const ScopedStoreTimeout&) = delete;
  ScopedStoreTimeout& operator=(const ScopedStoreTimeout&) = delete;

  /// The limit of this thread's innermost scope for `store`, if any.
  static const std::chrono::milliseconds* limit_for(const Store* store) {
    for (const ScopedStoreTimeout* s = innermost_; s != nullptr; s = s->outer_)
      if (s->store_ == store) return &s->limit_;
    return nullptr;
  }

 private:
  const Store* store_;
  std::chrono::milliseconds limit_;
  const ScopedStoreTimeout* outer_;
  static inline thread_local const ScopedStoreTimeout* innermost_ = nullptr;
};

inline std::chrono::milliseconds Store::timeout() const {
  const std::chrono::milliseconds* scoped = ScopedStoreTimeout::limit_for(this);
  return scoped != nullptr ? *scoped : std::chrono::milliseconds(timeout_ms_.load());
}

/// Where the store is and how it behaves: `TCPStoreOptions().host(addr).port(p).is_server(rank == 0)`.
struct TCPStoreOptions {
  /// The server binds here (not to every interface); clients connect here.
  RINGGRAD_ARG(std::string, host) = "127.0.0.1";
  RINGGRAD_ARG(int, port) = 29500;        ///< 0 on the server: pick a free port (read it back with port())
  RINGGRAD_ARG(bool, is_server) = false;  ///< rank 0: serve the store in a background thread, and be a client too
  RINGGRAD_ARG(std::chrono::milliseconds, timeout){300000};  ///< connecting, and every blocking get/wait
  RINGGRAD_ARG(std::string, token);  ///< job token sent/checked first on every connection ("" = none)
  /// Print a line to stderr at a slow rhythm while the constructor waits for the server to listen
  /// ("rendezvous: waiting for the store at host:port ..."), so a rank whose rank 0 never starts
  /// does not wait in silence. init_process_group turns it on.
  RINGGRAD_ARG(bool, report_waiting) = false;
  RINGGRAD_ARG(int64_t, max_value_bytes) = int64_t{64} << 20;  ///< the largest value set() accepts
};

/// The Store of a job: rank 0 serves it over TCP (is_server) and every rank, rank 0 included, is a
/// client. Connections present the job token first when one is set.
class TCPStore : public Store {
 public:
  /// Starts the server (is_server) and connects, retrying until options.timeout() while the server is
  /// not listening yet; throws ringgrad::Error naming host:port when it cannot.
  explicit TCPStore(const TCPStoreOptions& options);
  ~TCPStore() override;  ///< a server stops its thread and closes every connection

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys) override;
  std::vector<std::string> wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds limit) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  using Store::set;

  int port() const;  ///< the server's port (useful with port 0)
  /// On the server: connections closed so far because they presented a wrong job token, and because
  /// they presented none within the handshake limit (a stopped client, a port scanner). 0 on a client.
  struct Refused {
    ///@{
    /// connections refused for each reason
    int64_t wrong_token = 0, silent = 0;
    ///@}
  };
  Refused refused_connections() const;  ///< see Refused

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parallel
}  // namespace ringgrad
