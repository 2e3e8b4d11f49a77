// parallel/store_client.cpp: TCPStore, the client every rank holds (rank 0's also starts the server).
//
// One connection per TCPStore object, one request at a time under a lock: connect() shakes hands
// (job token, then a ping), exchange() sends a request and reads its reply, and each Store method
// is a few lines that encode its request (store_protocol.h) and decode its result. A failed
// exchange closes the connection, so a reply still on its way is never read as the next one's.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <mutex>
#include <optional>
#include <utility>

#include <ringgrad/core/base/error.h>
#include "parallel/socket.h"
#include <ringgrad/parallel/store.h>
#include "parallel/store_protocol.h"
#include "parallel/store_server.h"

namespace ringgrad {
namespace parallel {

namespace {

using detail::str;
using std::chrono::milliseconds;

// Reads the result fields of one reply, each with the exchange's deadline and description.
struct ReplyReader {
  const Socket& socket;
  Deadline deadline;
  const std::string& what;

  uint8_t u8() const {
    uint8_t v = 0;
    socket.recv_all(&v, 1, deadline, what);
    return v;
  }
  uint32_t u32() const {
    uint8_t b[4];
    socket.recv_all(b, sizeof b, deadline, what);
    return load_u32(b);
  }
  int64_t i64() const {
    uint8_t b[8];
    socket.recv_all(b, sizeof b, deadline, what);
    return load_i64(b);
  }
  // [u32 n][n bytes], refusing an n over `max_bytes` before allocating for it.
  std::vector<uint8_t> bytes(uint64_t max_bytes) const {
    const uint32_t n = u32();
    RINGGRAD_CHECK(n <= max_bytes, what, ": the store's reply announces ", n, " bytes, over the limit of ", max_bytes,
                   " (a store of another version, or not a store at all, at ", socket.peer(), "?)");
    std::vector<uint8_t> out(n);
    socket.recv_all(out.data(), n, deadline, what);
    return out;
  }
  std::string text(uint64_t max_bytes) const {
    const std::vector<uint8_t> b = bytes(max_bytes);
    return std::string(b.begin(), b.end());
  }
};

void check_key(const std::string& what, const std::string& key) {
  RINGGRAD_CHECK(key.size() <= kMaxKeyBytes, what, ": expected a key of at most ", kMaxKeyBytes, " bytes, got ",
                 key.size(), " bytes");
}

void check_keys(const std::string& what, const std::vector<std::string>& keys) {
  RINGGRAD_CHECK(keys.size() <= kMaxKeys, what, ": expected at most ", kMaxKeys, " keys in one call, got ",
                 keys.size());
  for (const std::string& key : keys) check_key(what, key);
}

}  // namespace

struct TCPStore::Impl {
  TCPStoreOptions options;
  std::unique_ptr<StoreServer> server;  // on the is_server process only
  int port = 0;                         // where the store listens (the server's, when port 0 was asked)
  std::string address;                  // "host:port", for messages
  std::mutex mutex;                     // one exchange at a time on `socket`
  Socket socket;                        // last, so it closes before the server stops; reopened after a failed exchange

  // What came back for a get or wait: ok, or "timed out" with the keys still missing.
  struct Outcome {
    bool timed_out = false;
    std::vector<std::string> missing;
  };

  void connect(milliseconds timeout);
  template <typename ReadResult>
  Outcome exchange(const std::string& what, const std::vector<uint8_t>& request, milliseconds timeout,
                   milliseconds reply_timeout, ReadResult read_result);
  [[noreturn]] void throw_timed_out(const std::string& what, milliseconds timeout, const Outcome& outcome) const;
};

// Opens the connection and shakes hands: the job token, then a ping the server answers only if it
// accepted the token. A failed handshake is reported once, here, as what was seen -- the store
// closed the connection (a store refuses a wrong token that way), nothing answered, or something
// answered that is not a store -- and not later as a mystery on the first get.
void TCPStore::Impl::connect(milliseconds timeout) {
  const Deadline deadline = deadline_after(timeout);
  std::optional<WaitReporter> reporter;
  if (options.report_waiting()) {
    reporter.emplace([this, timeout](milliseconds waited) {
      std::fprintf(stderr,
                   "rendezvous: waiting for rank 0's store at %s: nothing listens there yet (%lld s of %lld s)\n",
                   address.c_str(), static_cast<long long>(waited.count() / 1000),
                   static_cast<long long>(timeout.count() / 1000));
    });
  }
  Socket s =
      connect_to(options.host(), port, deadline, "TCPStore: connecting to the store", reporter ? &*reporter : nullptr);
  s.set_nodelay();
  // A live store answers the handshake in microseconds, so it gets a short limit of its own rather
  // than the whole timeout: whatever stays silent that long is not a store that will answer.
  const Deadline handshake_by = std::min(deadline, Clock::now() + kHandshakeLimit);
  const milliseconds handshake_ms =
      std::min(kHandshakeLimit, std::chrono::ceil<milliseconds>(handshake_by - Clock::now()));
  const std::string ours =
      options.token().empty() ? "sends none" : str("sends one of ", options.token().size(), " bytes");
  uint8_t status = 0xff;
  switch (handshake(s, options.token(), request_header(Command::Ping, {}), handshake_by, status)) {
    case Handshake::Answered: break;
    case Handshake::Closed:
      throw Error(str("TCPStore: the store at ", address, " did not accept this connection: it closed it without ",
                      "answering the handshake, as a ringgrad store does when the job token differs. Every process ",
                      "of a job must use the same RINGGRAD_JOB_TOKEN, and this one ", ours));
    case Handshake::Silent:
      throw Error(str("TCPStore: connected to ", address, ", but nothing answered the handshake within ",
                      handshake_ms.count(), " ms: the process listening there is not a ringgrad store, or it is ",
                      "stopped (a rank 0 suspended by Ctrl-Z or SIGSTOP accepts connections but never answers); ",
                      "check MASTER_ADDR and MASTER_PORT"));
  }
  // Whatever answered is not a store of ours: an HTTP server, say, behind a mistyped port.
  RINGGRAD_CHECK(status == static_cast<uint8_t>(Status::Ok), "TCPStore: expected a TCPStore at ", address,
                 ", but it answered the handshake with byte ", int{status}, " instead of status 0; do MASTER_ADDR ",
                 "and MASTER_PORT point at another service?");
  socket = std::move(s);
}

// One request and its reply. Holds the lock throughout. If the exchange does not finish -- the
// store closed, a deadline passed -- the connection is closed: part of the reply may still be on
// its way, and the next call starts on a fresh connection rather than read it as its own.
template <typename ReadResult>
TCPStore::Impl::Outcome TCPStore::Impl::exchange(const std::string& what, const std::vector<uint8_t>& request,
                                                 milliseconds timeout, milliseconds reply_timeout,
                                                 ReadResult read_result) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!socket.valid()) connect(timeout);  // the store's timeout now, which diagnostics may have shortened
  Outcome outcome;
  Status status = Status::Ok;
  std::string message;
  try {
    const Deadline deadline = deadline_after(reply_timeout);
    socket.send_all(request.data(), request.size(), deadline, what);
    const ReplyReader reply{socket, deadline, what};
    status = static_cast<Status>(reply.u8());
    if (status == Status::Ok) {
      read_result(reply);
    } else if (status == Status::Error) {
      message = reply.text(1 << 20);
    } else if (status == Status::TimedOut) {
      outcome.timed_out = true;
      const uint32_t n = reply.u32();
      RINGGRAD_CHECK(n <= kMaxKeys, what, ": the store's reply lists ", n, " missing keys, over the limit of ",
                     kMaxKeys);
      for (uint32_t i = 0; i < n; ++i) outcome.missing.push_back(reply.text(kMaxKeyBytes));
    } else {
      throw Error(str(what, ": expected reply status 0, 1 or 2 from the store at ", address, ", got ", int(status)));
    }
  } catch (const Error&) {
    socket.close();
    throw;
  }
  // The message comes from the peer: escaped, since whatever answers on the port may send anything.
  RINGGRAD_CHECK(status != Status::Error, what, ": ", detail::printable(message, 1000), " (store at ", address, ")");
  return outcome;
}

void TCPStore::Impl::throw_timed_out(const std::string& what, milliseconds timeout, const Outcome& outcome) const {
  const std::string still_missing = outcome.missing.empty() ? "" : "; still missing: " + quoted(outcome.missing);
  throw Error(str(what, ": timed out after ", timeout.count(), " ms", still_missing, " (store at ", address, ")"));
}

TCPStore::TCPStore(const TCPStoreOptions& options) : impl_(std::make_unique<Impl>()) {
  RINGGRAD_CHECK(options.max_value_bytes() >= 0 && options.max_value_bytes() <= UINT32_MAX,
                 "TCPStore: expected max_value_bytes in [0, 4294967295] (lengths travel as u32), got ",
                 options.max_value_bytes());
  RINGGRAD_CHECK(options.token().size() <= kMaxTokenBytes, "TCPStore: expected a job token of at most ", kMaxTokenBytes,
                 " bytes, got ", options.token().size());
  impl_->options = options;
  set_timeout(options.timeout());
  if (options.is_server()) impl_->server = std::make_unique<StoreServer>(options);
  impl_->port = impl_->server ? impl_->server->port() : options.port();
  impl_->address = str(options.host(), ":", impl_->port);
  impl_->connect(options.timeout());  // the server process is a client too, like every rank
}

TCPStore::~TCPStore() = default;

int TCPStore::port() const { return impl_->port; }

TCPStore::Refused TCPStore::refused_connections() const {
  if (!impl_->server) return {};
  return {impl_->server->refused_token(), impl_->server->refused_silent()};
}

void TCPStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  const std::string what = "TCPStore set(" + quoted(key) + ")";
  check_key(what, key);
  RINGGRAD_CHECK(static_cast<int64_t>(value.size()) <= impl_->options.max_value_bytes(), what,
                 ": expected a value of at most ", impl_->options.max_value_bytes(),
                 " bytes (TCPStoreOptions::max_value_bytes), got ", value.size(), " bytes");
  std::vector<uint8_t> request = request_header(Command::Set, {key});
  put_bytes(request, value.data(), value.size());
  impl_->exchange(what, request, timeout(), timeout(), [](const ReplyReader&) {});
}

std::vector<uint8_t> TCPStore::get(const std::string& key) {
  const std::string what = "TCPStore get(" + quoted(key) + ")";
  check_key(what, key);
  std::vector<uint8_t> request = request_header(Command::Get, {key});
  put_i64(request, timeout().count());
  std::vector<uint8_t> value;
  const auto max_bytes = static_cast<uint64_t>(impl_->options.max_value_bytes());
  const Impl::Outcome outcome = impl_->exchange(what, request, timeout(), timeout() + kReplyGrace,
                                                [&](const ReplyReader& reply) { value = reply.bytes(max_bytes); });
  if (outcome.timed_out) impl_->throw_timed_out(what, timeout(), Impl::Outcome{});
  return value;
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  const std::string what = "TCPStore add(" + quoted(key) + ", " + std::to_string(delta) + ")";
  check_key(what, key);
  std::vector<uint8_t> request = request_header(Command::Add, {key});
  put_i64(request, delta);
  int64_t sum = 0;
  impl_->exchange(what, request, timeout(), timeout(), [&](const ReplyReader& reply) { sum = reply.i64(); });
  return sum;
}

void TCPStore::wait(const std::vector<std::string>& keys) {
  const std::string what = "TCPStore wait([" + quoted(keys) + "])";
  check_keys(what, keys);
  std::vector<uint8_t> request = request_header(Command::Wait, keys);
  put_i64(request, timeout().count());
  const Impl::Outcome outcome =
      impl_->exchange(what, request, timeout(), timeout() + kReplyGrace, [](const ReplyReader&) {});
  if (outcome.timed_out) impl_->throw_timed_out(what, timeout(), outcome);
}

std::vector<std::string> TCPStore::wait_for(const std::vector<std::string>& keys, milliseconds limit) {
  const std::string what = "TCPStore wait_for([" + quoted(keys) + "])";
  check_keys(what, keys);
  std::vector<uint8_t> request = request_header(Command::Wait, keys);
  put_i64(request, limit.count());
  const Impl::Outcome outcome =
      impl_->exchange(what, request, timeout(), limit + kReplyGrace, [](const ReplyReader&) {});
  return outcome.timed_out ? outcome.missing : std::vector<std::string>{};
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  const std::string what = "TCPStore check([" + quoted(keys) + "])";
  check_keys(what, keys);
  bool all_exist = false;
  impl_->exchange(what, request_header(Command::Check, keys), timeout(), timeout(),
                  [&](const ReplyReader& reply) { all_exist = reply.u8() != 0; });
  return all_exist;
}

bool TCPStore::delete_key(const std::string& key) {
  const std::string what = "TCPStore delete_key(" + quoted(key) + ")";
  check_key(what, key);
  bool existed = false;
  impl_->exchange(what, request_header(Command::Delete, {key}), timeout(), timeout(),
                  [&](const ReplyReader& reply) { existed = reply.u8() != 0; });
  return existed;
}

}  // namespace parallel
}  // namespace ringgrad
