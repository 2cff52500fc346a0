#include "replica-agent/model/fetcher.hpp"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

#include "common/log/log.hpp"
#include "common/net/conn.hpp"
#include "replica-agent/core/backoff.hpp"

namespace fg::agent {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;

namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(30);
constexpr auto kHeadTimeout = std::chrono::seconds(60);
// Between two pieces of the body: a stalled server is dropped and the download resumed.
constexpr auto kIdleTimeout = std::chrono::seconds(60);
constexpr int kMaxRedirects = 5;
constexpr std::size_t kHashPiece = 4 * 1024 * 1024;

// A response head's fields the download needs, and the body as it arrives.
class DownloadParser final : public http::basic_parser<false> {
 public:
  unsigned status() const { return status_; }
  const std::string& content_range() const { return content_range_; }
  const std::string& location() const { return location_; }
  std::optional<std::uint64_t> length() const { return length_; }
  std::string take_body() { return std::exchange(body_, {}); }

 private:
  void on_request_impl(http::verb, beast::string_view, beast::string_view, int,
                       beast::error_code&) override {}
  void on_response_impl(int code, beast::string_view, int, beast::error_code&) override {
    status_ = static_cast<unsigned>(code);
  }
  void on_field_impl(http::field name, beast::string_view, beast::string_view value,
                     beast::error_code&) override {
    if (name == http::field::content_range) {
      content_range_.assign(value.data(), value.size());
    } else if (name == http::field::location) {
      location_.assign(value.data(), value.size());
    }
  }
  void on_header_impl(beast::error_code&) override {}
  void on_body_init_impl(boost::optional<std::uint64_t> const& length,
                         beast::error_code&) override {
    if (length) {
      length_ = *length;
    }
  }
  std::size_t on_body_impl(beast::string_view body, beast::error_code&) override {
    body_.append(body.data(), body.size());
    return body.size();
  }
  void on_chunk_header_impl(std::uint64_t, beast::string_view, beast::error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, beast::string_view body,
                                 beast::error_code&) override {
    body_.append(body.data(), body.size());
    return body.size();
  }
  void on_finish_impl(beast::error_code&) override {}

  unsigned status_ = 0;
  std::string content_range_;
  std::string location_;
  std::optional<std::uint64_t> length_;
  std::string body_;
};

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) {
      std::fclose(f);
    }
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

std::uint64_t file_size(const std::string& path) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  return ec ? 0 : static_cast<std::uint64_t>(size);
}

bool file_exists(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

// A URL and its query ("?..."), which net::Url does not hold (redirects to CDNs carry one).
struct Target {
  net::Url url;
  std::string query;
};

std::optional<Target> parse_target(const std::string& text, std::string* error) {
  const auto cut = text.find_first_of("?#");
  Target target;
  auto url = net::parse_url(text.substr(0, cut), error);
  if (!url) {
    return std::nullopt;
  }
  target.url = *url;
  if (cut != std::string::npos && text[cut] == '?') {
    target.query = text.substr(cut, text.find('#', cut) - cut);
  }
  return target;
}

// A Location relative to the current URL ("/path?x") or absolute.
std::optional<Target> resolve_location(const Target& from, const std::string& location,
                                       std::string* error) {
  if (location.rfind("http://", 0) == 0 || location.rfind("https://", 0) == 0) {
    return parse_target(location, error);
  }
  if (location.empty() || location.front() != '/') {
    *error = "unsupported redirect Location";
    return std::nullopt;
  }
  net::Url base = from.url;
  base.path_prefix.clear();
  return parse_target(base.to_string() + location, error);
}

asio::awaitable<bool> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  co_return !ec;
}

double unit_draw(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace

ModelFetcher::ModelFetcher(asio::any_io_executor executor, AgentContext* ctx)
    : executor_(std::move(executor)), ctx_(ctx), rng_(std::random_device{}()) {}

ModelFetcher::~ModelFetcher() {
  stop_.emit(asio::cancellation_type::terminal);
}

void ModelFetcher::start(std::function<void(bool)> done) {
  done_ = std::move(done);
  asio::co_spawn(executor_, run(this),
                 asio::bind_cancellation_slot(stop_.slot(), [](std::exception_ptr e) {
                   if (!e) {
                     return;
                   }
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::exception& ex) {
                     log::error("task failed", {{"task", "model download"}, {"error", ex.what()}});
                   }
                 }));
}

void ModelFetcher::stop() {
  stopped_ = true;
  stop_.emit(asio::cancellation_type::terminal);
}

void ModelFetcher::finish(bool ok) {
  if (done_) {
    auto done = std::move(done_);
    done_ = nullptr;
    done(ok);
  }
}

asio::awaitable<std::string> ModelFetcher::hash_file(ModelFetcher* self, std::string path) {
  File file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    co_return std::string();
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(md.get(), EVP_sha256(), nullptr);
  std::string piece(kHashPiece, '\0');
  for (;;) {
    const std::size_t n = std::fread(piece.data(), 1, piece.size(), file.get());
    if (n > 0) {
      EVP_DigestUpdate(md.get(), piece.data(), n);
    }
    if (n < piece.size()) {
      break;
    }
    // Let the io thread answer /health and requests between pieces.
    co_await asio::post(self->executor_, asio::use_awaitable);
  }
  if (std::ferror(file.get()) != 0) {
    co_return std::string();
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(md.get(), digest, &length);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 0xf];
  }
  co_return hex;
}

asio::awaitable<bool> ModelFetcher::fetch_once(ModelFetcher* self, bool* failed) {
  const ModelFileConfig& mf = self->ctx_->config.model_file;
  const std::string part = model::part_path(mf.path);
  model::Progress& progress = self->progress_;
  std::string error;
  auto target = parse_target(mf.url, &error);
  if (!target) {
    progress.error = "model_file.url: " + error;
    *failed = true;
    co_return false;
  }
  for (int redirects = 0;; ++redirects) {
    const std::uint64_t offset = file_size(part);
    progress.bytes_done = offset;
    asio::ssl::context* tls = self->ctx_->client_tls.get();
    if (target->url.tls() && tls == nullptr) {
      progress.error = "https needs TLS";
      *failed = true;
      co_return false;
    }
    auto connected = co_await net::connect_to(target->url, tls, kConnectTimeout);
    if (!connected.conn) {
      progress.error = "cannot connect to " + target->url.host_header();
      co_return false;
    }
    net::Conn& conn = *connected.conn;
    std::string path = target->url.path_prefix.empty() ? "/" : target->url.path_prefix;
    std::string request = "GET " + path + target->query +
                          " HTTP/1.1\r\nHost: " + target->url.host_header() +
                          "\r\nUser-Agent: fleetgate-agent/" FLEETGATE_VERSION
                          "\r\nAccept: */*\r\nConnection: close\r\n";
    if (offset > 0) {
      request += "Range: " + model::range_header(offset) + "\r\n";
    }
    request += "\r\n";
    conn.expires_after(kHeadTimeout);
    auto [wec, wn] = co_await conn.write(asio::buffer(request));
    if (wec) {
      progress.error = "write failed: " + wec.message();
      co_return false;
    }
    DownloadParser parser;
    parser.eager(true);
    parser.body_limit(boost::none);
    beast::flat_buffer buffer;
    // The head.
    while (!parser.is_header_done()) {
      auto [rec, n] = co_await conn.read_some(buffer.prepare(16 * 1024));
      if (rec) {
        progress.error = "no answer from the model URL: " + rec.message();
        co_return false;
      }
      buffer.commit(n);
      beast::error_code pec;
      buffer.consume(parser.put(buffer.data(), pec));
      if (pec && pec != http::error::need_more) {
        progress.error = "malformed answer from the model URL";
        co_return false;
      }
    }
    auto decision = model::decide(offset, parser.status(), parser.content_range(), parser.length(),
                                  !parser.location().empty());
    switch (decision.step) {
      case model::Step::fail:
        progress.error = decision.error;
        *failed = true;
        co_return false;
      case model::Step::retry:
        progress.error = decision.error;
        co_return false;
      case model::Step::refetch: {
        log::warn("model download: starting over", {{"reason", decision.error}});
        std::error_code removed;
        fs::remove(part, removed);
        progress.bytes_done = 0;
        progress.error = decision.error;
        co_return false;
      }
      case model::Step::complete:
        progress.bytes_total = *decision.total;
        co_return true;
      case model::Step::redirect: {
        if (redirects >= kMaxRedirects) {
          progress.error = "more than 5 redirects";
          *failed = true;
          co_return false;
        }
        auto next = resolve_location(*target, parser.location(), &error);
        if (!next) {
          progress.error = "redirect: " + error;
          *failed = true;
          co_return false;
        }
        target = std::move(next);
        continue;
      }
      case model::Step::append:
      case model::Step::restart:
        break;
    }
    const bool append = decision.step == model::Step::append;
    if (!append && offset > 0) {
      log::info("model download: the server sent the whole file; starting over",
                {{"had_bytes", offset}});
    }
    std::uint64_t done = append ? offset : 0;
    progress.bytes_done = done;
    if (decision.total) {
      progress.bytes_total = *decision.total;
    } else if (parser.length()) {
      progress.bytes_total = done + *parser.length();
    }
    File file(std::fopen(part.c_str(), append ? "ab" : "wb"));
    if (!file) {
      progress.error = "cannot write " + part + ": " + std::strerror(errno);
      *failed = true;
      co_return false;
    }
    auto write_body = [&]() -> bool {
      std::string piece = parser.take_body();
      if (piece.empty()) {
        return true;
      }
      if (std::fwrite(piece.data(), 1, piece.size(), file.get()) != piece.size()) {
        return false;
      }
      done += piece.size();
      progress.bytes_done = done;
      return true;
    };
    bool write_ok = write_body();
    while (write_ok && !parser.is_done()) {
      conn.expires_after(kIdleTimeout);
      auto [rec, n] = co_await conn.read_some(buffer.prepare(256 * 1024));
      beast::error_code pec;
      if (rec == asio::error::eof) {
        parser.put_eof(pec);
        write_ok = write_body();
        break;
      }
      if (rec) {
        break;
      }
      buffer.commit(n);
      buffer.consume(parser.put(buffer.data(), pec));
      if (pec && pec != http::error::need_more) {
        break;
      }
      write_ok = write_body();
    }
    if (std::fflush(file.get()) != 0 || !write_ok) {
      progress.error = "cannot write " + part + ": " + std::strerror(errno);
      *failed = true;
      co_return false;
    }
    file.reset();
    conn.close();
    if (!parser.is_done() || (progress.bytes_total != 0 && done < progress.bytes_total)) {
      progress.error = "the connection ended after " + std::to_string(done) + " of " +
                       std::to_string(progress.bytes_total) + " bytes";
      co_return false;
    }
    progress.bytes_total = done;
    co_return true;
  }
}

asio::awaitable<void> ModelFetcher::run(ModelFetcher* self) {
  co_await asio::this_coro::throw_if_cancelled(false);
  const ModelFileConfig& mf = self->ctx_->config.model_file;
  model::Progress& progress = self->progress_;
  const auto started = std::chrono::steady_clock::now();
  if (file_exists(mf.path)) {
    progress.state = model::State::verifying;
    progress.bytes_done = progress.bytes_total = file_size(mf.path);
    if (co_await hash_file(self, mf.path) == mf.sha256) {
      progress.state = model::State::done;
      log::info("model file present and verified", {{"path", mf.path}});
      self->finish(true);
      co_return;
    }
    log::warn("model file present but its sha256 differs: downloading it again",
              {{"path", mf.path}});
    std::error_code ec;
    fs::remove(mf.path, ec);
  }
  log::info("model download: starting",
            {{"path", mf.path}, {"resume_from", file_size(model::part_path(mf.path))}});
  for (;;) {
    progress.state = model::State::downloading;
    bool failed = false;
    const bool complete = co_await fetch_once(self, &failed);
    if (self->stopped_) {
      co_return;
    }
    if (failed) {
      progress.state = model::State::failed;
      log::error("model download failed", {{"error", progress.error}});
      self->finish(false);
      co_return;
    }
    if (complete) {
      break;
    }
    auto delay = backoff_delay(self->failures_++, unit_draw(self->rng_));
    log::warn("model download interrupted: resuming", {{"error", progress.error},
                                                       {"bytes_done", progress.bytes_done},
                                                       {"retry_in_ms", delay.count()}});
    if (!co_await sleep_for(delay) || self->stopped_) {
      co_return;
    }
  }
  progress.state = model::State::verifying;
  const std::string part = model::part_path(mf.path);
  const std::string got = co_await hash_file(self, part);
  if (got != mf.sha256) {
    progress.state = model::State::failed;
    progress.error = model::checksum_error(mf.sha256, got.empty() ? "unreadable" : got);
    std::error_code ec;
    fs::remove(part, ec);
    log::error("model download failed", {{"error", progress.error}, {"path", mf.path}});
    self->finish(false);
    co_return;
  }
  std::error_code ec;
  fs::rename(part, mf.path, ec);
  if (ec) {
    progress.state = model::State::failed;
    progress.error = "cannot rename " + part + ": " + ec.message();
    log::error("model download failed", {{"error", progress.error}});
    self->finish(false);
    co_return;
  }
  progress.state = model::State::done;
  progress.error.clear();
  log::info("model downloaded and verified",
            {{"path", mf.path},
             {"bytes", progress.bytes_total},
             {"took_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - started)
                             .count()}});
  self->finish(true);
}

}  // namespace fg::agent
