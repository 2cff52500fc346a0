#include "orchestrator/health/probe_socket.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <system_error>
#include <utility>

namespace fg::health {

namespace {

// recvmsg without waiting, with the kernel's receive timestamp of the bytes it returns.
ssize_t receive_stamped(int fd, std::span<char> buffer,
                        std::optional<std::int64_t>* arrived_unix_ns) {
  iovec iov{buffer.data(), buffer.size()};
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(timespec))> control;
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
        timespec ts{};
        std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
        *arrived_unix_ns = static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
      }
    }
  }
  return n;
}

}  // namespace

// An https probe connection's OpenSSL reads and writes its socket through this (a BIO of our
// own in place of OpenSSL's socket BIO): reads with recvmsg, so that the bytes come with the
// kernel's receive timestamp; writes with send(MSG_NOSIGNAL). With OpenSSL's socket BIO, which
// reads with read(2), a MSG_PEEK recvmsg before each read fetched the timestamp: one system call
// more per probe.
struct ProbeSocket::TlsSocketIo {
  int fd = -1;
  std::optional<std::int64_t> arrived_unix_ns;  // of the last bytes read
  bool eof = false;                             // a read found the connection's end

  static BIO_METHOD* method();  // nullptr if OpenSSL could not make it
  static int read(BIO* bio, char* out, int size);
  static int write(BIO* bio, const char* in, int size);
  static long ctrl(BIO* bio, int cmd, long num, void* ptr);
  static int create(BIO* bio) {
    BIO_set_init(bio, 1);
    return 1;
  }
};

int ProbeSocket::TlsSocketIo::read(BIO* bio, char* out, int size) {
  auto* io = static_cast<TlsSocketIo*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  errno = 0;  // as OpenSSL's socket BIO: a connection's end leaves it 0 (see receive_tls)
  const ssize_t n =
      receive_stamped(io->fd, std::span(out, static_cast<std::size_t>(size)), &io->arrived_unix_ns);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    BIO_set_retry_read(bio);
  }
  io->eof = n == 0;
  return static_cast<int>(n);
}

int ProbeSocket::TlsSocketIo::write(BIO* bio, const char* in, int size) {
  auto* io = static_cast<TlsSocketIo*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  ssize_t n;
  do {
    n = ::send(io->fd, in, static_cast<std::size_t>(size), MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    BIO_set_retry_write(bio);
  }
  return static_cast<int>(n);
}

long ProbeSocket::TlsSocketIo::ctrl(BIO* bio, int cmd, long /*num*/, void* /*ptr*/) {
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;  // nothing is buffered here
    case BIO_CTRL_EOF:
      // OpenSSL asks after a failed read: a connection's end without close_notify.
      return static_cast<TlsSocketIo*>(BIO_get_data(bio))->eof ? 1 : 0;
    default:
      return 0;
  }
}

BIO_METHOD* ProbeSocket::TlsSocketIo::method() {
  static BIO_METHOD* const made = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "fleetgate probe");
    if (m != nullptr && (BIO_meth_set_read(m, &TlsSocketIo::read) != 1 ||
                         BIO_meth_set_write(m, &TlsSocketIo::write) != 1 ||
                         BIO_meth_set_ctrl(m, &TlsSocketIo::ctrl) != 1 ||
                         BIO_meth_set_create(m, &TlsSocketIo::create) != 1)) {
      BIO_meth_free(m);
      m = nullptr;
    }
    return m;
  }();
  return made;
}

ProbeSocket::ProbeSocket() = default;

ProbeSocket::ProbeSocket(int fd, ssl_st* ssl) : fd_(fd), ssl_(ssl) {
  if (ssl_ == nullptr) {
    return;
  }
  SSL_set_read_ahead(ssl_, 1);
  BIO_METHOD* method = TlsSocketIo::method();
  BIO* bio = method != nullptr ? BIO_new(method) : nullptr;
  if (bio == nullptr) {
    return;  // out of memory: OpenSSL's socket BIO stays, and answers come without timestamps
  }
  tls_io_ = std::make_unique<TlsSocketIo>();
  tls_io_->fd = fd;
  BIO_set_data(bio, tls_io_.get());
  // Frees the socket BIO that SSL_set_fd made (BIO_NOCLOSE: the descriptor stays open). Nothing
  // is buffered in it: net::release_tls hands over a connection with nothing pending.
  SSL_set_bio(ssl_, bio, bio);
}

ProbeSocket::ProbeSocket(ProbeSocket&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      ssl_(std::exchange(other.ssl_, nullptr)),
      tls_io_(std::move(other.tls_io_)) {}

ProbeSocket::~ProbeSocket() {
  close();
}

ProbeSocket& ProbeSocket::operator=(ProbeSocket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    ssl_ = std::exchange(other.ssl_, nullptr);
    tls_io_ = std::move(other.tls_io_);
  }
  return *this;
}

void ProbeSocket::close() {
  if (ssl_ != nullptr) {
    SSL_free(ssl_);  // no close_notify: the replica sees the connection end, as with plain ones
    ssl_ = nullptr;
  }
  tls_io_.reset();  // after SSL_free, which frees the BIO that points to it
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

bool ProbeSocket::send_now(std::string_view bytes) {
  if (ssl_ != nullptr) {
    // A gone replica is a failed write; WANT_WRITE (it did not fit) is too.
    ERR_clear_error();
    std::size_t n = 0;
    const bool ok = SSL_write_ex(ssl_, bytes.data(), bytes.size(), &n) == 1 && n == bytes.size();
    ERR_clear_error();
    return ok;
  }
  const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  return n == static_cast<ssize_t>(bytes.size());
}

ProbeSocket::Received ProbeSocket::receive_tls(std::span<char> buffer) {
  Received out;
  if (tls_io_ != nullptr) {
    tls_io_->arrived_unix_ns.reset();
  }
  ERR_clear_error();
  std::size_t n = 0;
  const int r = SSL_read_ex(ssl_, buffer.data(), buffer.size(), &n);
  const int saved_errno = errno;
  if (tls_io_ != nullptr) {
    out.arrived_unix_ns = tls_io_->arrived_unix_ns;  // none when OpenSSL had the bytes already
  }
  if (r == 1) {
    out.bytes = n;
    return out;
  }
  const int why = SSL_get_error(ssl_, r);
  const unsigned long queued = ERR_peek_error();
  ERR_clear_error();
  if (why == SSL_ERROR_WANT_READ || why == SSL_ERROR_WANT_WRITE) {
    out.would_block = true;  // a record not whole yet, or only TLS's own messages (tickets)
  } else if (why == SSL_ERROR_ZERO_RETURN ||
             (why == SSL_ERROR_SSL &&
              ERR_GET_REASON(queued) == SSL_R_UNEXPECTED_EOF_WHILE_READING) ||
             (why == SSL_ERROR_SYSCALL && queued == 0 && saved_errno == 0)) {
    out.eof = true;  // close_notify, or the connection's end without it
  } else {
    out.error = true;
  }
  return out;
}

ProbeSocket::Received ProbeSocket::receive_now(std::span<char> buffer) {
  if (ssl_ != nullptr) {
    return receive_tls(buffer);
  }
  Received out;
  const ssize_t n = receive_stamped(fd_, buffer, &out.arrived_unix_ns);
  if (n < 0) {
    out.would_block = errno == EAGAIN || errno == EWOULDBLOCK;
    out.error = !out.would_block;
  } else if (n == 0) {
    out.eof = true;
  } else {
    out.bytes = static_cast<std::size_t>(n);
  }
  return out;
}

ProbePoller::ProbePoller() : epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)) {
  if (epoll_fd_ < 0) {
    throw std::system_error(errno, std::generic_category(), "epoll_create1 for probes");
  }
}

ProbePoller::~ProbePoller() {
  ::close(epoll_fd_);
}

bool ProbePoller::add(const ProbeSocket& socket, std::uint64_t key) {
  // Best effort: without receive timestamps an answer's time is counted until it is read.
  const int on = 1;
  ::setsockopt(socket.fd(), SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on));
  // Edge-triggered: a socket is reported once per arrival, and the checker reads each one it is
  // told about until a short read or closes it. Level-triggered, every reported socket was
  // polled again at the next epoll_wait (perf: epoll was 9% of the probing CPU, 6% so).
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = key;
  return ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, socket.fd(), &ev) == 0;
}

std::size_t ProbePoller::ready(std::span<std::uint64_t> keys) {
  std::array<epoll_event, kBatch> events;
  const int n = ::epoll_wait(epoll_fd_, events.data(),
                             static_cast<int>(std::min(events.size(), keys.size())), 0);
  for (int i = 0; i < n; ++i) {
    keys[static_cast<std::size_t>(i)] = events[static_cast<std::size_t>(i)].data.u64;
  }
  return n > 0 ? static_cast<std::size_t>(n) : 0;
}

}  // namespace fg::health
