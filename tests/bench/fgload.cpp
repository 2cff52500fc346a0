// fgload: the load generator and fake backend of Fleetgate's benchmarks (./fleet bench).
//
//   fgload run   --url http://127.0.0.1:PORT/v1/chat/completions --body JSON [options]
//   fgload serve --listen 127.0.0.1:0 [options]
//
// `run` is a closed-loop HTTP/1.1 client: C keep-alive connections, each sending its next request
// as soon as the previous answer ended, on one epoll loop per thread. It times every request from
// the first byte written to the last byte read, and for event streams the response head, the first
// SSE event and the gap between consecutive events (an event is complete at its blank line). Only
// answers that end inside the measured window [warmup, warmup + duration] count; after the window
// no new request starts and answers still running get `--grace` seconds to end. It prints one JSON
// object on stdout (percentiles in milliseconds).
//
// `serve` is a fake replica: GET .../health answers {"status":"ok"}; a POST whose body says
// "stream": true gets a paced SSE stream (`--chunks` events, the first after `--first-ms`, then one
// every `--interval-ms`, then data: [DONE]); any other POST gets a fixed chat.completion after
// `--delay-ms`. Any path prefix is accepted, so many distinct replica URLs can share one server.
// With `--cert FILE --key FILE` it serves https (OpenSSL's defaults, as the agent's: TLS 1.3),
// like a phone's address.
//
// Raw sockets and epoll, OpenSSL only for `serve --cert`: the tool must cost less CPU than what
// it measures.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <queue>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

using i64 = std::int64_t;

i64 now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<i64>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "fgload: %s\n", message.c_str());
  std::exit(2);
}

bool parse_hostport(const std::string& text, sockaddr_in* out) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos) {
    return false;
  }
  std::string host = text.substr(0, colon);
  if (host == "localhost") {
    host = "127.0.0.1";
  }
  std::memset(out, 0, sizeof(*out));
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<std::uint16_t>(std::atoi(text.c_str() + colon + 1)));
  return inet_pton(AF_INET, host.c_str(), &out->sin_addr) == 1;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    die("cannot read " + path);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

bool iequals_prefix(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) {
    return false;
  }
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) !=
        std::tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// ------------------------------------------------------------------------------------------------
// Statistics

struct Summary {
  std::size_t n = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0, min = 0;
};

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) {
    return 0;
  }
  // Nearest rank: the smallest value with at least p of the samples at or below it.
  auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

Summary summarize(std::vector<double>& v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) {
    return s;
  }
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v)
    sum += x;
  s.mean = sum / static_cast<double>(v.size());
  s.p50 = percentile(v, 0.50);
  s.p90 = percentile(v, 0.90);
  s.p99 = percentile(v, 0.99);
  s.p999 = percentile(v, 0.999);
  s.max = v.back();
  s.min = v.front();
  return s;
}

std::string json_summary(const Summary& s) {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "{\"n\":%zu,\"mean\":%.4f,\"min\":%.4f,\"p50\":%.4f,\"p90\":%.4f,\"p99\":%.4f,"
                "\"p999\":%.4f,\"max\":%.4f}",
                s.n, s.mean, s.min, s.p50, s.p90, s.p99, s.p999, s.max);
  return buf;
}

// ------------------------------------------------------------------------------------------------
// Client (`run`)

struct RunOptions {
  sockaddr_in addr{};
  std::string host_header;
  std::string path = "/";
  std::string method = "POST";
  std::string body;
  std::vector<std::string> headers;
  int connections = 1;
  int threads = 1;
  double duration = 5;
  double warmup = 0;
  double grace = 5;
  long long requests = 0;   // total cap (0 = none)
  bool once = false;        // one request per connection, then close it
  double connect_rate = 0;  // new connections per second (0 = all at once)
  bool progress = false;
  double max_time = 600;  // hard bound on the whole run
};

struct ThreadStats {
  std::vector<double> latency, head, first_event, gap;
  std::map<int, long long> status;
  long long errors_connect = 0, errors_reset = 0, errors_eof = 0, errors_parse = 0;
  long long completed_in_window = 0, completed_total = 0, events = 0, unfinished = 0;
  long long max_open = 0;
  long long gaps_under_1ms = 0;
};

struct Shared {
  std::atomic<long long> budget{0};  // requests still allowed when options.requests > 0
  std::atomic<long long> open_streams{0};
  std::atomic<long long> connected{0};
  std::atomic<long long> done{0};
  std::atomic<long long> active_conns{0};
};

enum class CState { idle, connecting, writing, reading, closed };

struct ClientConn {
  int fd = -1;
  CState state = CState::idle;
  std::size_t wpos = 0;
  std::string in;  // unparsed input
  std::size_t ipos = 0;
  // response parsing
  bool head_done = false;
  int status = 0;
  bool chunked = false;
  bool close_after = false;
  long long content_length = -1;  // -1 unknown
  long long remaining = 0;        // body bytes left (content-length) or in current chunk
  int chunk_phase = 0;            // 0 size line, 1 data, 2 CRLF after data, 3 trailers
  bool prev_newline = false;
  // timing
  i64 t_start = 0, t_head = 0, t_first = 0, t_last_event = 0;
  bool any_event = false;
  std::vector<double> gaps;
  bool counted_open = false;
  int done_requests = 0;
  i64 reconnect_at = 0;
};

class Client {
 public:
  Client(const RunOptions& opt, Shared* shared, int tid, std::vector<int> conn_ids, i64 t0)
      : opt_(opt), shared_(shared), tid_(tid), ids_(std::move(conn_ids)), t0_(t0) {
    request_ = opt_.method + " " + opt_.path + " HTTP/1.1\r\nHost: " + opt_.host_header +
               "\r\nUser-Agent: fgload\r\nAccept: */*\r\n";
    for (const auto& h : opt_.headers)
      request_ += h + "\r\n";
    if (!opt_.body.empty() || opt_.method == "POST") {
      request_ +=
          "Content-Type: application/json\r\nContent-Length: " + std::to_string(opt_.body.size()) +
          "\r\n";
    }
    request_ += "\r\n" + opt_.body;
    warm_end_ = t0_ + static_cast<i64>(opt_.warmup * 1e9);
    deadline_ = warm_end_ + static_cast<i64>(opt_.duration * 1e9);
    hard_end_ = std::min(deadline_ + static_cast<i64>(opt_.grace * 1e9),
                         t0_ + static_cast<i64>(opt_.max_time * 1e9));
    conns_.resize(ids_.size());
  }

  void run() {
    ep_ = epoll_create1(0);
    if (ep_ < 0)
      die("epoll_create1 failed");
    std::vector<epoll_event> events(1024);
    std::size_t next_to_open = 0;
    char buf[65536];
    for (;;) {
      i64 now = now_ns();
      // Open connections (at once, or at the configured rate across all threads).
      while (next_to_open < conns_.size()) {
        i64 when = t0_;
        if (opt_.connect_rate > 0) {
          when = t0_ + static_cast<i64>(static_cast<double>(ids_[next_to_open]) /
                                        opt_.connect_rate * 1e9);
        }
        if (when > now)
          break;
        if (now < deadline_ && budget_left())
          start_connection(next_to_open, now);
        ++next_to_open;
      }
      if (!reconnects_.empty()) {
        std::vector<std::size_t> later;
        for (std::size_t i : reconnects_) {
          auto& c = conns_[i];
          if (c.reconnect_at > now) {
            later.push_back(i);
            continue;
          }
          c.reconnect_at = 0;
          if (now < deadline_ && budget_left())
            start_connection(i, now);
        }
        reconnects_.swap(later);
      }
      if (now >= hard_end_)
        break;
      const bool idle = live_ == 0 && reconnects_.empty();
      if (idle && (next_to_open >= conns_.size() || now >= deadline_))
        break;
      int timeout_ms = 100;
      if (next_to_open < conns_.size() && opt_.connect_rate > 0)
        timeout_ms = 1;
      if (!reconnects_.empty())
        timeout_ms = std::min(timeout_ms, 10);
      int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), timeout_ms);
      now = now_ns();
      for (int k = 0; k < n; ++k) {
        std::size_t i = events[k].data.u64;
        auto& c = conns_[i];
        if (c.fd < 0)
          continue;
        std::uint32_t ev = events[k].events;
        if (c.state == CState::connecting) {
          int err = 0;
          socklen_t len = sizeof(err);
          getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0 || (ev & (EPOLLERR | EPOLLHUP))) {
            stats_.errors_connect++;
            fail(i, now);
            continue;
          }
          shared_->connected++;
          begin_request(i, now);
          continue;
        }
        if (c.state == CState::writing && (ev & EPOLLOUT)) {
          write_some(i, now);
          if (c.fd < 0)
            continue;
        }
        if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
          for (;;) {
            ssize_t got = recv(c.fd, buf, sizeof(buf), 0);
            if (got > 0) {
              now = now_ns();
              if (!consume(i, buf, static_cast<std::size_t>(got), now))
                break;
              if (static_cast<std::size_t>(got) < sizeof(buf))
                break;
              continue;
            }
            if (got == 0) {
              on_eof(i, now);
              break;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK)
              break;
            if (errno == EINTR)
              continue;
            if (c.state == CState::reading || c.state == CState::writing)
              stats_.errors_reset++;
            fail(i, now);
            break;
          }
        }
      }
    }
    for (auto& c : conns_) {
      if (c.fd >= 0) {
        if (c.state == CState::reading || c.state == CState::writing ||
            c.state == CState::connecting)
          stats_.unfinished++;
        if (c.counted_open)
          shared_->open_streams--;
        close(c.fd);
        c.fd = -1;
        shared_->active_conns--;
      }
    }
    close(ep_);
  }

  ThreadStats& stats() { return stats_; }

 private:
  bool budget_left() const { return opt_.requests <= 0 || shared_->budget.load() > 0; }
  bool take_budget() {
    if (opt_.requests <= 0)
      return true;
    return shared_->budget.fetch_sub(1) > 0;
  }

  void start_connection(std::size_t i, i64 now) {
    auto& c = conns_[i];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      stats_.errors_connect++;
      c.state = CState::closed;
      return;
    }
    set_nodelay(fd);
    int done = c.done_requests;
    c = ClientConn{};
    c.done_requests = done;
    c.fd = fd;
    c.state = CState::connecting;
    ++live_;
    shared_->active_conns++;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
    ev.data.u64 = i;
    epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
    int rc = connect(fd, reinterpret_cast<const sockaddr*>(&opt_.addr), sizeof(opt_.addr));
    if (rc != 0 && errno != EINPROGRESS) {
      stats_.errors_connect++;
      fail(i, now);
    }
  }

  void begin_request(std::size_t i, i64 now) {
    auto& c = conns_[i];
    if (!take_budget()) {
      close_conn(i);
      return;
    }
    c.state = CState::writing;
    c.wpos = 0;
    c.head_done = false;
    c.status = 0;
    c.chunked = false;
    c.close_after = false;
    c.content_length = -1;
    c.remaining = 0;
    c.chunk_phase = 0;
    c.prev_newline = false;
    c.any_event = false;
    c.gaps.clear();
    c.t_first = 0;
    c.t_start = now;
    c.t_head = 0;
    write_some(i, now);
  }

  void write_some(std::size_t i, i64 now) {
    auto& c = conns_[i];
    while (c.wpos < request_.size()) {
      ssize_t n = send(c.fd, request_.data() + c.wpos, request_.size() - c.wpos, MSG_NOSIGNAL);
      if (n > 0) {
        c.wpos += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
        ev.data.u64 = i;
        epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
        return;
      }
      stats_.errors_reset++;
      fail(i, now);
      return;
    }
    c.state = CState::reading;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = i;
    epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  // A connection failed: close it; reconnect later unless the run is over.
  void fail(std::size_t i, i64 now) {
    auto& c = conns_[i];
    close_conn(i);
    if (!opt_.once && now < deadline_) {
      c.state = CState::idle;
      c.reconnect_at = now + 10'000'000;  // 10 ms: a refusing server is not hammered
      reconnects_.push_back(i);
    }
  }

  void close_conn(std::size_t i) {
    auto& c = conns_[i];
    if (c.counted_open) {
      shared_->open_streams--;
      c.counted_open = false;
    }
    if (c.fd >= 0) {
      epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
      close(c.fd);
      c.fd = -1;
      --live_;
      shared_->active_conns--;
    }
    c.state = CState::closed;
  }

  void on_eof(std::size_t i, i64 now) {
    auto& c = conns_[i];
    if (c.state == CState::reading && c.head_done && !c.chunked && c.content_length < 0) {
      finish(i, now);  // a close-delimited body ends here
      return;
    }
    if (c.state == CState::reading || c.state == CState::writing)
      stats_.errors_eof++;
    fail(i, now);
  }

  void on_event(ClientConn& c, i64 now) {
    if (!c.any_event) {
      c.any_event = true;
      c.t_last_event = now;
      c.t_first = now;
      return;
    }
    c.gaps.push_back(static_cast<double>(now - c.t_last_event) / 1e6);
    c.t_last_event = now;
  }

  void body_bytes(ClientConn& c, const char* p, std::size_t n, i64 now) {
    for (std::size_t k = 0; k < n; ++k) {
      char ch = p[k];
      if (ch == '\r')
        continue;
      if (ch == '\n') {
        if (c.prev_newline) {
          on_event(c, now);
          c.prev_newline = false;
          continue;
        }
        c.prev_newline = true;
      } else {
        c.prev_newline = false;
      }
    }
  }

  // Returns false when the connection was closed or reused (stop reading this round).
  bool consume(std::size_t i, const char* data, std::size_t n, i64 now) {
    auto& c = conns_[i];
    if (c.state != CState::reading) {
      // Bytes before we finished writing (an early answer): keep them.
      if (c.state != CState::writing)
        return true;
    }
    c.in.append(data, n);
    for (;;) {
      if (!c.head_done) {
        auto end = c.in.find("\r\n\r\n", c.ipos);
        if (end == std::string::npos) {
          if (c.in.size() > 65536) {
            stats_.errors_parse++;
            fail(i, now);
            return false;
          }
          return true;
        }
        std::string_view head(c.in.data() + c.ipos, end - c.ipos);
        c.ipos = end + 4;
        if (!parse_head(c, head)) {
          stats_.errors_parse++;
          fail(i, now);
          return false;
        }
        c.head_done = true;
        c.t_head = now;
        if (c.status == 200 && (c.chunked || c.content_length < 0)) {
          c.counted_open = true;
          long long open = ++shared_->open_streams;
          if (open > stats_.max_open)
            stats_.max_open = open;
        }
        if (!c.chunked && c.content_length == 0) {
          return complete(i, now);
        }
      }
      std::size_t avail = c.in.size() - c.ipos;
      const char* p = c.in.data() + c.ipos;
      if (!c.chunked) {
        if (c.content_length < 0) {
          body_bytes(c, p, avail, now);
          c.ipos += avail;
          compact(c);
          return true;
        }
        std::size_t take = static_cast<std::size_t>(std::min<long long>(c.remaining, avail));
        body_bytes(c, p, take, now);
        c.remaining -= static_cast<long long>(take);
        c.ipos += take;
        if (c.remaining == 0)
          return complete(i, now);
        compact(c);
        return true;
      }
      // chunked
      if (avail == 0) {
        compact(c);
        return true;
      }
      if (c.chunk_phase == 0) {
        auto eol = c.in.find("\r\n", c.ipos);
        if (eol == std::string::npos) {
          compact(c);
          return true;
        }
        long long size = std::strtoll(c.in.c_str() + c.ipos, nullptr, 16);
        c.ipos = eol + 2;
        if (size == 0) {
          c.chunk_phase = 3;
        } else {
          c.remaining = size;
          c.chunk_phase = 1;
        }
        continue;
      }
      if (c.chunk_phase == 1) {
        std::size_t take = static_cast<std::size_t>(std::min<long long>(c.remaining, avail));
        body_bytes(c, p, take, now);
        c.remaining -= static_cast<long long>(take);
        c.ipos += take;
        if (c.remaining == 0)
          c.chunk_phase = 2;
        continue;
      }
      if (c.chunk_phase == 2) {
        if (avail < 2) {
          compact(c);
          return true;
        }
        c.ipos += 2;
        c.chunk_phase = 0;
        continue;
      }
      // trailers: end at an empty line
      auto eol = c.in.find("\r\n", c.ipos);
      if (eol == std::string::npos) {
        compact(c);
        return true;
      }
      bool empty = eol == c.ipos;
      c.ipos = eol + 2;
      if (empty)
        return complete(i, now);
    }
  }

  void compact(ClientConn& c) {
    if (c.ipos == c.in.size()) {
      c.in.clear();
      c.ipos = 0;
    } else if (c.ipos > 32768) {
      c.in.erase(0, c.ipos);
      c.ipos = 0;
    }
  }

  bool parse_head(ClientConn& c, std::string_view head) {
    auto eol = head.find("\r\n");
    std::string_view status_line = head.substr(0, eol);
    if (status_line.size() < 12 || status_line.substr(0, 5) != "HTTP/")
      return false;
    c.status = std::atoi(std::string(status_line.substr(9, 3)).c_str());
    if (eol == std::string_view::npos)
      return true;
    std::string_view rest = head.substr(eol + 2);
    while (!rest.empty()) {
      auto e = rest.find("\r\n");
      std::string_view line = rest.substr(0, e);
      rest = e == std::string_view::npos ? std::string_view() : rest.substr(e + 2);
      auto colon = line.find(':');
      if (colon == std::string_view::npos)
        continue;
      std::string_view name = line.substr(0, colon);
      std::string_view value = trim(line.substr(colon + 1));
      if (name.size() == 14 && iequals_prefix(name, "content-length")) {
        c.content_length = std::atoll(std::string(value).c_str());
        c.remaining = c.content_length;
      } else if (name.size() == 17 && iequals_prefix(name, "transfer-encoding")) {
        c.chunked = iequals_prefix(value, "chunked");
      } else if (name.size() == 10 && iequals_prefix(name, "connection")) {
        c.close_after = iequals_prefix(value, "close");
      }
    }
    if (c.chunked)
      c.content_length = -1;
    return true;
  }

  bool complete(std::size_t i, i64 now) { return finish(i, now); }

  bool finish(std::size_t i, i64 now) {
    auto& c = conns_[i];
    if (c.counted_open) {
      shared_->open_streams--;
      c.counted_open = false;
    }
    stats_.completed_total++;
    shared_->done++;
    c.done_requests++;
    if (now >= warm_end_ && now <= deadline_) {
      stats_.completed_in_window++;
      stats_.status[c.status]++;
      if (c.status >= 200 && c.status < 300) {
        stats_.latency.push_back(static_cast<double>(now - c.t_start) / 1e6);
        stats_.head.push_back(static_cast<double>(c.t_head - c.t_start) / 1e6);
        if (c.any_event) {
          stats_.first_event.push_back(static_cast<double>(c.t_first - c.t_start) / 1e6);
          stats_.events += static_cast<long long>(c.gaps.size()) + 1;
          stats_.gap.insert(stats_.gap.end(), c.gaps.begin(), c.gaps.end());
          for (double g : c.gaps)
            stats_.gaps_under_1ms += g < 1.0 ? 1 : 0;
        }
      }
    }
    c.in.erase(0, c.ipos);
    c.ipos = 0;
    bool leftover = !c.in.empty();
    if (c.close_after || opt_.once || leftover) {
      close_conn(i);
      if (!opt_.once && now < deadline_) {
        c.state = CState::idle;
        c.reconnect_at = now;
        reconnects_.push_back(i);
      }
      return false;
    }
    if (now >= deadline_) {
      close_conn(i);
      return false;
    }
    begin_request(i, now);
    return false;
  }

  const RunOptions& opt_;
  Shared* shared_;
  int tid_;
  std::vector<int> ids_;
  i64 t0_, warm_end_ = 0, deadline_ = 0, hard_end_ = 0;
  int ep_ = -1;
  std::string request_;
  std::vector<ClientConn> conns_;
  ThreadStats stats_;
  std::vector<std::size_t> reconnects_;
  long long live_ = 0;  // connections with an open socket
};

int cmd_run(int argc, char** argv) {
  RunOptions opt;
  std::string url;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc)
        die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--url")
      url = next();
    else if (a == "--body")
      opt.body = next();
    else if (a == "--body-file")
      opt.body = read_file(next());
    else if (a == "--method")
      opt.method = next();
    else if (a == "--header")
      opt.headers.push_back(next());
    else if (a == "--connections" || a == "-c")
      opt.connections = std::atoi(next().c_str());
    else if (a == "--threads" || a == "-t")
      opt.threads = std::atoi(next().c_str());
    else if (a == "--duration" || a == "-d")
      opt.duration = std::atof(next().c_str());
    else if (a == "--warmup")
      opt.warmup = std::atof(next().c_str());
    else if (a == "--grace")
      opt.grace = std::atof(next().c_str());
    else if (a == "--requests")
      opt.requests = std::atoll(next().c_str());
    else if (a == "--once")
      opt.once = true;
    else if (a == "--connect-rate")
      opt.connect_rate = std::atof(next().c_str());
    else if (a == "--progress")
      opt.progress = true;
    else if (a == "--max-time")
      opt.max_time = std::atof(next().c_str());
    else
      die("unknown option " + a);
  }
  if (url.rfind("http://", 0) != 0)
    die("--url must start with http://");
  std::string rest = url.substr(7);
  auto slash = rest.find('/');
  std::string hostport = slash == std::string::npos ? rest : rest.substr(0, slash);
  opt.path = slash == std::string::npos ? "/" : rest.substr(slash);
  opt.host_header = hostport;
  if (!parse_hostport(hostport, &opt.addr))
    die("bad host:port in --url: " + hostport);
  if (opt.connections < 1 || opt.threads < 1)
    die("--connections and --threads must be >= 1");
  opt.threads = std::min(opt.threads, opt.connections);
  if (opt.method == "GET")
    opt.body.clear();
  if (opt.requests > 0)
    opt.duration = std::max(opt.duration, opt.max_time);

  signal(SIGPIPE, SIG_IGN);
  Shared shared;
  shared.budget = opt.requests;
  rusage ru0{};
  getrusage(RUSAGE_SELF, &ru0);
  const i64 t0 = now_ns();
  std::vector<std::unique_ptr<Client>> clients;
  for (int t = 0; t < opt.threads; ++t) {
    std::vector<int> ids;
    for (int k = t; k < opt.connections; k += opt.threads)
      ids.push_back(k);
    clients.push_back(std::make_unique<Client>(opt, &shared, t, std::move(ids), t0));
  }
  std::atomic<bool> finished{false};
  std::thread reporter;
  if (opt.progress) {
    reporter = std::thread([&] {
      while (!finished.load()) {
        for (int k = 0; k < 10 && !finished.load(); ++k)
          usleep(100000);
        if (finished.load())
          break;
        std::fprintf(stderr,
                     "{\"t\":%.1f,\"connected\":%lld,\"open_streams\":%lld,\"done\":%lld,"
                     "\"conns\":%lld}\n",
                     static_cast<double>(now_ns() - t0) / 1e9, shared.connected.load(),
                     shared.open_streams.load(), shared.done.load(), shared.active_conns.load());
        std::fflush(stderr);
      }
    });
  }
  std::vector<std::thread> threads;
  for (auto& c : clients)
    threads.emplace_back([&c] { c->run(); });
  for (auto& th : threads)
    th.join();
  finished = true;
  if (reporter.joinable())
    reporter.join();
  const i64 t_end = now_ns();
  rusage ru1{};
  getrusage(RUSAGE_SELF, &ru1);
  auto secs = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  double cpu = secs(ru1.ru_utime) - secs(ru0.ru_utime) + secs(ru1.ru_stime) - secs(ru0.ru_stime);

  ThreadStats all;
  for (auto& c : clients) {
    auto& s = c->stats();
    all.latency.insert(all.latency.end(), s.latency.begin(), s.latency.end());
    all.head.insert(all.head.end(), s.head.begin(), s.head.end());
    all.first_event.insert(all.first_event.end(), s.first_event.begin(), s.first_event.end());
    all.gap.insert(all.gap.end(), s.gap.begin(), s.gap.end());
    for (auto& [k, v] : s.status)
      all.status[k] += v;
    all.errors_connect += s.errors_connect;
    all.errors_reset += s.errors_reset;
    all.errors_eof += s.errors_eof;
    all.errors_parse += s.errors_parse;
    all.completed_in_window += s.completed_in_window;
    all.completed_total += s.completed_total;
    all.events += s.events;
    all.unfinished += s.unfinished;
    all.max_open = std::max(all.max_open, s.max_open);
    all.gaps_under_1ms += s.gaps_under_1ms;
  }
  // With a fixed request count the window is the whole run.
  double window = opt.requests > 0 ? static_cast<double>(t_end - t0) / 1e9 : opt.duration;
  long long ok = static_cast<long long>(all.latency.size());
  std::string status_json = "{";
  for (auto& [k, v] : all.status) {
    if (status_json.size() > 1)
      status_json += ",";
    status_json += "\"" + std::to_string(k) + "\":" + std::to_string(v);
  }
  status_json += "}";
  std::printf(
      "{\"connections\":%d,\"threads\":%d,\"window_s\":%.3f,\"elapsed_s\":%.3f,"
      "\"completed\":%lld,\"ok\":%lld,\"rps\":%.3f,\"completed_total\":%lld,"
      "\"unfinished\":%lld,\"status\":%s,"
      "\"errors\":{\"connect\":%lld,\"reset\":%lld,\"eof\":%lld,\"parse\":%lld},"
      "\"events\":%lld,\"gaps_under_1ms\":%lld,\"max_open_streams\":%lld,\"cpu_s\":%.3f,",
      opt.connections, opt.threads, window, static_cast<double>(t_end - t0) / 1e9,
      all.completed_in_window, ok, window > 0 ? static_cast<double>(ok) / window : 0.0,
      all.completed_total, all.unfinished, status_json.c_str(), all.errors_connect,
      all.errors_reset, all.errors_eof, all.errors_parse, all.events, all.gaps_under_1ms,
      all.max_open, cpu);
  std::printf("\"latency_ms\":%s,", json_summary(summarize(all.latency)).c_str());
  std::printf("\"head_ms\":%s,", json_summary(summarize(all.head)).c_str());
  std::printf("\"first_event_ms\":%s,", json_summary(summarize(all.first_event)).c_str());
  std::printf("\"gap_ms\":%s}\n", json_summary(summarize(all.gap)).c_str());
  return 0;
}

// ------------------------------------------------------------------------------------------------
// Fake replica (`serve`)

struct ServeOptions {
  std::string listen = "127.0.0.1:0";
  int chunks = 20;
  double interval_ms = 20;
  double first_ms = 0;
  double delay_ms = 0;
  int threads = 1;
  std::string model = "m";
  std::string cert_file, key_file;  // both: https
};

volatile sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

struct ServerConn {
  int fd = -1;
  SSL* ssl = nullptr;  // https: the connection's TLS (its handshake done once SSL_is_init_finished)
  std::uint32_t gen = 0;
  std::string in;
  std::string out;
  bool busy = false;    // answering a request
  int chunks_left = 0;  // stream events still to send
  bool want_close = false;
};

struct Timer {
  i64 at;
  int fd;
  std::uint32_t gen;
  bool operator>(const Timer& o) const { return at > o.at; }
};

class Server {
 public:
  // tls: nullptr for plain http.
  Server(const ServeOptions& opt, int listen_fd, SSL_CTX* tls)
      : opt_(opt), lfd_(listen_fd), tls_(tls) {
    std::string json =
        "{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion\",\"created\":1700000000,"
        "\"model\":\"" +
        opt_.model +
        "\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"
        "\"RISK_LEVEL: 2\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":12,"
        "\"completion_tokens\":5,\"total_tokens\":17}}";
    json_reply_ = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                  std::to_string(json.size()) + "\r\n\r\n" + json;
    std::string health = "{\"status\":\"ok\"}";
    health_reply_ = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                    std::to_string(health.size()) + "\r\n\r\n" + health;
    stream_head_ =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        "Transfer-Encoding: chunked\r\n\r\n";
    std::string event =
        "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":"
        "1700000000,\"model\":\"" +
        opt_.model +
        "\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" risk\"},\"finish_reason\":null}]}"
        "\n\n";
    stream_chunk_ = hex(event.size()) + "\r\n" + event + "\r\n";
    std::string last =
        "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":"
        "1700000000,\"model\":\"" +
        opt_.model +
        "\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":"
        "{\"prompt_tokens\":12,\"completion_tokens\":20,\"total_tokens\":32}}\n\n";
    stream_last_ = hex(last.size()) + "\r\n" + last + "\r\n";
    std::string done = "data: [DONE]\n\n";
    stream_end_ = hex(done.size()) + "\r\n" + done + "\r\n0\r\n\r\n";
  }

  void run() {
    ep_ = epoll_create1(0);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = static_cast<std::uint64_t>(-1);
    epoll_ctl(ep_, EPOLL_CTL_ADD, lfd_, &ev);
    std::vector<epoll_event> events(1024);
    char buf[65536];
    while (!g_stop) {
      int timeout = 200;
      i64 now = now_ns();
      if (!timers_.empty()) {
        i64 wait = (timers_.top().at - now) / 1000000;
        timeout = static_cast<int>(std::clamp<i64>(wait, 0, 200));
      }
      int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), timeout);
      for (int k = 0; k < n; ++k) {
        if (events[k].data.u64 == static_cast<std::uint64_t>(-1)) {
          accept_all();
          continue;
        }
        int fd = static_cast<int>(events[k].data.u64);
        if (fd >= static_cast<int>(conns_.size()) || conns_[fd].fd < 0)
          continue;
        if (events[k].events & EPOLLOUT)
          flush(fd);
        if (conns_[fd].fd < 0)
          continue;
        if (events[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
          read_input(fd, buf, sizeof(buf));
        }
      }
      now = now_ns();
      while (!timers_.empty() && timers_.top().at <= now) {
        Timer t = timers_.top();
        timers_.pop();
        if (t.fd < static_cast<int>(conns_.size()) && conns_[t.fd].fd >= 0 &&
            conns_[t.fd].gen == t.gen) {
          on_timer(t.fd, now);
        }
      }
    }
  }

 private:
  static std::string hex(std::size_t n) {
    char b[32];
    std::snprintf(b, sizeof(b), "%zx", n);
    return b;
  }

  // Reads what has arrived (https: through TLS, its handshake first) and answers it.
  void read_input(int fd, char* buf, std::size_t size) {
    for (;;) {
      ssize_t got = receive(fd, buf, size);
      if (got > 0) {
        conns_[fd].in.append(buf, static_cast<std::size_t>(got));
        if (conns_[fd].ssl == nullptr && static_cast<std::size_t>(got) < size)
          break;  // plain TCP: a short read emptied the socket (TLS reads until it would block)
        continue;
      }
      if (got == kWouldBlock)
        break;
      drop(fd);
      return;
    }
    if (conns_[fd].fd >= 0)
      handle_input(fd);
  }

  static constexpr ssize_t kWouldBlock = -1;  // receive() and transmit(): try again later
  static constexpr ssize_t kFailed = -2;

  // > 0 bytes, 0 the peer closed, kWouldBlock, kFailed.
  ssize_t receive(int fd, char* buf, std::size_t size) {
    SSL* ssl = conns_[fd].ssl;
    if (ssl == nullptr)
      return plain_io([&] { return recv(fd, buf, size, 0); });
    ERR_clear_error();
    if (!SSL_is_init_finished(ssl)) {
      int r = SSL_accept(ssl);
      if (r != 1)
        return tls_failure(fd, r);
    }
    std::size_t n = 0;
    int r = SSL_read_ex(ssl, buf, size, &n);
    if (r == 1)
      return static_cast<ssize_t>(n);
    int why = SSL_get_error(ssl, r);
    return why == SSL_ERROR_ZERO_RETURN ? 0 : tls_failure(fd, r);
  }

  // Bytes written (> 0), kWouldBlock (nothing written: call again with the same bytes first) or
  // kFailed.
  ssize_t transmit(int fd, const char* data, std::size_t size) {
    SSL* ssl = conns_[fd].ssl;
    if (ssl == nullptr)
      return plain_io([&] { return send(fd, data, size, MSG_NOSIGNAL); });
    ERR_clear_error();
    std::size_t n = 0;
    int r = SSL_write_ex(ssl, data, size, &n);
    return r == 1 ? static_cast<ssize_t>(n) : tls_failure(fd, r);
  }

  // A plain socket call (recv or send), retried when interrupted, in receive()'s and
  // transmit()'s terms.
  template <class Call>
  static ssize_t plain_io(Call call) {
    for (;;) {
      ssize_t n = call();
      if (n >= 0)
        return n;
      if (errno != EINTR)
        return errno == EAGAIN || errno == EWOULDBLOCK ? kWouldBlock : kFailed;
    }
  }

  // After a failed OpenSSL call: kWouldBlock when it waits for the socket (watching it for
  // output while OpenSSL wants to write), else kFailed.
  ssize_t tls_failure(int fd, int r) {
    int why = SSL_get_error(conns_[fd].ssl, r);
    ERR_clear_error();
    if (why == SSL_ERROR_WANT_READ)
      return kWouldBlock;
    if (why == SSL_ERROR_WANT_WRITE) {
      watch(fd, true);
      return kWouldBlock;
    }
    return kFailed;
  }

  void watch(int fd, bool output) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (output ? EPOLLOUT : 0u);
    ev.data.u64 = static_cast<std::uint64_t>(fd);
    epoll_ctl(ep_, EPOLL_CTL_MOD, fd, &ev);
  }

  void accept_all() {
    for (;;) {
      int fd = accept4(lfd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0)
        return;
      set_nodelay(fd);
      if (fd >= static_cast<int>(conns_.size()))
        conns_.resize(fd + 1024);
      auto& c = conns_[fd];
      std::uint32_t gen = c.gen + 1;
      c = ServerConn{};
      c.fd = fd;
      c.gen = gen;
      if (tls_ != nullptr) {
        c.ssl = SSL_new(tls_);
        if (c.ssl == nullptr || SSL_set_fd(c.ssl, fd) != 1)
          die("cannot make a TLS connection");
        SSL_set_accept_state(c.ssl);
      }
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = static_cast<std::uint64_t>(fd);
      epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev);
    }
  }

  void drop(int fd) {
    auto& c = conns_[fd];
    if (c.fd < 0)
      return;
    epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
    if (c.ssl != nullptr) {
      SSL_free(c.ssl);
      c.ssl = nullptr;
    }
    close(fd);
    c.fd = -1;
    c.gen++;
    c.in.clear();
    c.out.clear();
    c.in.shrink_to_fit();
    c.out.shrink_to_fit();
  }

  void send_bytes(int fd, const std::string& bytes) {
    auto& c = conns_[fd];
    if (!c.out.empty()) {
      c.out += bytes;
      return;
    }
    std::size_t pos = 0;
    while (pos < bytes.size()) {
      ssize_t n = transmit(fd, bytes.data() + pos, bytes.size() - pos);
      if (n > 0) {
        pos += static_cast<std::size_t>(n);
        continue;
      }
      if (n == kWouldBlock) {
        c.out.assign(bytes, pos, std::string::npos);
        watch(fd, true);
        return;
      }
      drop(fd);
      return;
    }
  }

  void flush(int fd) {
    auto& c = conns_[fd];
    if (c.ssl != nullptr && !SSL_is_init_finished(c.ssl)) {
      watch(fd, false);  // the handshake wanted to write: go on with it
      char buf[4096];
      read_input(fd, buf, sizeof(buf));
      return;
    }
    while (!c.out.empty()) {
      ssize_t n = transmit(fd, c.out.data(), c.out.size());
      if (n > 0) {
        c.out.erase(0, static_cast<std::size_t>(n));
        continue;
      }
      if (n == kWouldBlock)
        return;
      drop(fd);
      return;
    }
    watch(fd, false);
  }

  void handle_input(int fd) {
    for (;;) {
      auto& c = conns_[fd];
      if (c.fd < 0 || c.busy)
        return;
      auto end = c.in.find("\r\n\r\n");
      if (end == std::string::npos) {
        if (c.in.size() > 65536)
          drop(fd);
        return;
      }
      std::string_view head(c.in.data(), end);
      long long length = 0;
      bool close_after = false;
      std::string_view rest = head;
      auto first_eol = rest.find("\r\n");
      std::string_view request_line = rest.substr(0, first_eol);
      rest = first_eol == std::string_view::npos ? std::string_view() : rest.substr(first_eol + 2);
      while (!rest.empty()) {
        auto e = rest.find("\r\n");
        std::string_view line = rest.substr(0, e);
        rest = e == std::string_view::npos ? std::string_view() : rest.substr(e + 2);
        auto colon = line.find(':');
        if (colon == std::string_view::npos)
          continue;
        std::string_view name = line.substr(0, colon);
        std::string_view value = trim(line.substr(colon + 1));
        if (name.size() == 14 && iequals_prefix(name, "content-length")) {
          length = std::atoll(std::string(value).c_str());
        } else if (name.size() == 10 && iequals_prefix(name, "connection")) {
          close_after = iequals_prefix(value, "close");
        }
      }
      std::size_t total = end + 4 + static_cast<std::size_t>(length);
      if (c.in.size() < total)
        return;
      std::string body = c.in.substr(end + 4, static_cast<std::size_t>(length));
      bool is_get = request_line.substr(0, 4) == "GET ";
      c.in.erase(0, total);
      c.want_close = close_after;
      if (is_get) {
        send_bytes(fd, health_reply_);
        if (close_after)
          drop(fd);
        continue;
      }
      bool stream = body.find("\"stream\":true") != std::string::npos ||
                    body.find("\"stream\": true") != std::string::npos;
      i64 now = now_ns();
      c.busy = true;
      if (stream) {
        send_bytes(fd, stream_head_);
        if (conns_[fd].fd < 0)
          return;
        conns_[fd].chunks_left = std::max(1, opt_.chunks);
        timers_.push({now + static_cast<i64>(opt_.first_ms * 1e6), fd, conns_[fd].gen});
        return;
      }
      if (opt_.delay_ms > 0) {
        c.chunks_left = -1;
        timers_.push({now + static_cast<i64>(opt_.delay_ms * 1e6), fd, c.gen});
        return;
      }
      c.busy = false;
      send_bytes(fd, json_reply_);
      if (conns_[fd].fd >= 0 && close_after)
        drop(fd);
    }
  }

  // A stream is `chunks` events, each its own HTTP chunk, paced: content events, then the last
  // event (finish_reason and usage), then data: [DONE] with the end of the body.
  void on_timer(int fd, i64 now) {
    auto& c = conns_[fd];
    if (c.chunks_left < 0) {  // delayed JSON answer
      c.busy = false;
      c.chunks_left = 0;
      send_bytes(fd, json_reply_);
    } else {
      int left = c.chunks_left--;
      send_bytes(fd, left <= 1 ? stream_end_ : left == 2 ? stream_last_ : stream_chunk_);
      if (conns_[fd].fd < 0)
        return;
      if (left > 1) {
        timers_.push({now + static_cast<i64>(opt_.interval_ms * 1e6), fd, conns_[fd].gen});
        return;
      }
      conns_[fd].busy = false;
    }
    if (conns_[fd].fd >= 0 && conns_[fd].want_close) {
      drop(fd);
      return;
    }
    if (conns_[fd].fd >= 0)
      handle_input(fd);
  }

  const ServeOptions& opt_;
  int lfd_;
  SSL_CTX* tls_;
  int ep_ = -1;
  std::vector<ServerConn> conns_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  std::string json_reply_, health_reply_, stream_head_, stream_chunk_, stream_last_, stream_end_;
};

int make_listener(const sockaddr_in& addr, bool reuseport) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (reuseport)
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    die(std::string("bind failed: ") + std::strerror(errno));
  }
  if (listen(fd, 65535) != 0)
    die("listen failed");
  return fd;
}

int cmd_serve(int argc, char** argv) {
  ServeOptions opt;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc)
        die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--listen")
      opt.listen = next();
    else if (a == "--chunks")
      opt.chunks = std::atoi(next().c_str());
    else if (a == "--interval-ms")
      opt.interval_ms = std::atof(next().c_str());
    else if (a == "--first-ms")
      opt.first_ms = std::atof(next().c_str());
    else if (a == "--delay-ms")
      opt.delay_ms = std::atof(next().c_str());
    else if (a == "--threads")
      opt.threads = std::max(1, std::atoi(next().c_str()));
    else if (a == "--model")
      opt.model = next();
    else if (a == "--cert")
      opt.cert_file = next();
    else if (a == "--key")
      opt.key_file = next();
    else
      die("unknown option " + a);
  }
  if (opt.cert_file.empty() != opt.key_file.empty())
    die("--cert and --key go together");
  SSL_CTX* tls = nullptr;
  if (!opt.cert_file.empty()) {
    tls = SSL_CTX_new(TLS_server_method());
    if (tls == nullptr || SSL_CTX_use_certificate_chain_file(tls, opt.cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(tls, opt.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      die("cannot load " + opt.cert_file + " and " + opt.key_file);
    // A pending write may be retried from c.out after more was appended to it.
    SSL_CTX_set_mode(tls, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  }
  sockaddr_in addr{};
  if (!parse_hostport(opt.listen, &addr))
    die("bad --listen " + opt.listen);
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::vector<int> fds;
  fds.push_back(make_listener(addr, opt.threads > 1));
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  getsockname(fds[0], reinterpret_cast<sockaddr*>(&bound), &len);
  for (int t = 1; t < opt.threads; ++t)
    fds.push_back(make_listener(bound, true));
  char ip[64];
  inet_ntop(AF_INET, &bound.sin_addr, ip, sizeof(ip));
  std::fprintf(stderr, "{\"msg\":\"listening\",\"listener\":\"fgload\",\"address\":\"%s:%u\"}\n",
               ip, ntohs(bound.sin_port));
  std::fflush(stderr);
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::thread> threads;
  for (int fd : fds)
    servers.push_back(std::make_unique<Server>(opt, fd, tls));
  for (std::size_t t = 1; t < servers.size(); ++t) {
    threads.emplace_back([&servers, t] { servers[t]->run(); });
  }
  servers[0]->run();
  for (auto& th : threads)
    th.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fprintf(
        stderr,
        "usage: fgload run --url http://HOST:PORT/PATH [--body JSON | --body-file F]\n"
        "         [--connections C] [--threads T] [--duration S] [--warmup S] [--grace S]\n"
        "         [--requests N] [--once] [--connect-rate R] [--progress] [--max-time S]\n"
        "         [--method GET|POST] [--header 'Name: value']...\n"
        "       fgload serve [--listen 127.0.0.1:0] [--chunks N] [--interval-ms I]\n"
        "         [--first-ms F] [--delay-ms D] [--threads T] [--model M]\n"
        "         [--cert FILE --key FILE]\n");
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  if (cmd == "run")
    return cmd_run(argc - 2, argv + 2);
  if (cmd == "serve")
    return cmd_serve(argc - 2, argv + 2);
  die("unknown command " + cmd + " (run or serve)");
}
