#pragma once

// Plain-TCP probe connections kept outside the event loop (Linux sockets, no Asio), so that an
// arriving answer wakes nobody: the health checker sends on them and reads what arrived at its
// own wake-ups, without waiting (HealthChecker, ProbeFlight).
//
// Why: Asio watches every socket it owns for input (edge-triggered epoll, from the moment the
// socket is opened, whether or not a read is pending), so each answer on an Asio socket may wake
// the io thread, and reading it takes an Asio operation, a timer for its deadline and a coroutine
// to resume. Here a tick's answers are read together at the next tick, two system calls per probe
// (its send, its receive) and nothing else: 5,000 replicas every 5 s (1,000 probes a second) went
// from 32 to 16 us of CPU per probe, 27,700 to 6,100 instructions in user space
// (docs/benchmarks.md). https replicas' probes work the same way: their OpenSSL connection
// (made by net::connect_to, taken over with net::release_tls) reads and writes the socket
// without waiting.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

struct ssl_st;  // OpenSSL's SSL

namespace fg::health {

// One connected socket (its descriptor, owned: closed on destruction), and for an https replica
// its OpenSSL connection (owned too), which then sends and receives on it.
class ProbeSocket {
 public:
  ProbeSocket();
  // ssl: from then on it reads ahead (one system call for a record's header and body) and goes
  // through the socket with recvmsg and send (see TlsSocketIo).
  explicit ProbeSocket(int fd, ssl_st* ssl = nullptr);
  ProbeSocket(ProbeSocket&& other) noexcept;
  ProbeSocket& operator=(ProbeSocket&& other) noexcept;
  ProbeSocket(const ProbeSocket&) = delete;
  ProbeSocket& operator=(const ProbeSocket&) = delete;
  ~ProbeSocket();

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // TLS: a read that returns less than its buffer says nothing about what is left (OpenSSL
  // returns one record at a time), so readers read until would_block.
  bool tls() const { return ssl_ != nullptr; }
  void close();

  // Sends all of bytes now, or fails: a request that does not fit at once (the replica does not
  // read what it was sent) counts as a failed write.
  bool send_now(std::string_view bytes);

  struct Received {
    std::size_t bytes = 0;
    bool would_block = false;  // nothing has arrived
    bool eof = false;          // the replica closed the connection
    bool error = false;        // a reset or another error
    // When the kernel received the last of these bytes (CLOCK_REALTIME, ns), if it said.
    std::optional<std::int64_t> arrived_unix_ns;
  };
  // Reads what has arrived, without waiting.
  Received receive_now(std::span<char> buffer);

  // What an https connection's reads learn beside the bytes (its OpenSSL connection reads
  // through it); kept apart so that it stays put when the socket is moved.
  struct TlsSocketIo;

 private:
  Received receive_tls(std::span<char> buffer);
  int fd_ = -1;
  ssl_st* ssl_ = nullptr;
  std::unique_ptr<TlsSocketIo> tls_io_;
};

// The probe sockets watched for input: one epoll set, asked without waiting.
class ProbePoller {
 public:
  ProbePoller();  // throws std::system_error when no epoll set can be made
  ~ProbePoller();
  ProbePoller(const ProbePoller&) = delete;
  ProbePoller& operator=(const ProbePoller&) = delete;

  // Watches the socket for input (bytes, its close, an error) under key, and turns on receive
  // timestamps for it (where the kernel has them). False when it cannot be watched. Closing the
  // socket ends the watch.
  bool add(const ProbeSocket& socket, std::uint64_t key);
  // Fills keys with those of watched sockets that received input since they were last reported,
  // at most kBatch; returns how many. Each is reported once per arrival (edge-triggered), so the
  // caller must read it until a short read (or close it); a full batch means more may wait.
  static constexpr std::size_t kBatch = 256;
  std::size_t ready(std::span<std::uint64_t> keys);

 private:
  int epoll_fd_ = -1;
};

}  // namespace fg::health
