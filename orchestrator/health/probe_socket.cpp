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

ProbeSocket::ProbeSocket(int fd, ssl_st* ssl) : fd_(fd), ssl_(ssl) {
  if (ssl_ != nullptr) {
    SSL_set_read_ahead(ssl_, 1);
  }
}

ProbeSocket& ProbeSocket::operator=(ProbeSocket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    ssl_ = std::exchange(other.ssl_, nullptr);
  }
  return *this;
}

void ProbeSocket::close() {
  if (ssl_ != nullptr) {
    SSL_free(ssl_);  // no close_notify: the replica sees the connection end, as with plain ones
    ssl_ = nullptr;
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

bool ProbeSocket::send_now(std::string_view bytes) {
  if (ssl_ != nullptr) {
    // OpenSSL writes with write(2): SIGPIPE is ignored since the first TLS connection
    // (net::TlsConn), so a gone replica is a failed write. WANT_WRITE (it did not fit) is too.
    ERR_clear_error();
    std::size_t n = 0;
    const bool ok = SSL_write_ex(ssl_, bytes.data(), bytes.size(), &n) == 1 && n == bytes.size();
    ERR_clear_error();
    return ok;
  }
  const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  return n == static_cast<ssize_t>(bytes.size());
}

namespace {

// recvmsg without waiting, with the kernel's receive timestamp of the bytes it returns (flags:
// MSG_PEEK to leave them in the socket).
ssize_t receive_stamped(int fd, std::span<char> buffer, int flags,
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
    n = ::recvmsg(fd, &msg, MSG_DONTWAIT | flags);
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

ProbeSocket::Received ProbeSocket::receive_tls(std::span<char> buffer) {
  Received out;
  // SSL_read reads with read(2), which has no timestamps: a peek at the socket first gives the
  // arrival time of what waits there (one system call more per read).
  char peeked = 0;
  const ssize_t p = receive_stamped(fd_, std::span(&peeked, 1), MSG_PEEK, &out.arrived_unix_ns);
  const int peek_errno = errno;
  if (p <= 0 && SSL_has_pending(ssl_) == 0) {
    out.would_block = p < 0 && (peek_errno == EAGAIN || peek_errno == EWOULDBLOCK);
    out.eof = p == 0;
    out.error = p < 0 && !out.would_block;
    return out;
  }
  ERR_clear_error();
  std::size_t n = 0;
  const int r = SSL_read_ex(ssl_, buffer.data(), buffer.size(), &n);
  const int saved_errno = errno;
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
  const ssize_t n = receive_stamped(fd_, buffer, 0, &out.arrived_unix_ns);
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
