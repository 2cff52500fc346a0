#include "orchestrator/cli/batch_command.hpp"

#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>

#include <openssl/rand.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <nlohmann/json.hpp>

#include "common/net/url.hpp"
#include "orchestrator/cli/batch_report.hpp"

namespace fg::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::use_awaitable;
using namespace std::chrono_literals;

// Ends the command with an exit code and a message for stderr.
struct Exit {
  int code;
  std::string message;
};

// A request body piece: literal bytes, or a file streamed from disk (never read whole).
struct Part {
  std::string text;
  std::string file;
};

struct Request {
  http::verb method = http::verb::get;
  std::string target;  // path and query, without the URL's prefix
  std::string content_type;
  std::vector<Part> body;
};

struct Reply {
  unsigned status = 0;
  std::string body;  // unless a 200 went to the sink
  std::int64_t bytes = 0;
};

// Receives a 200 answer's body piece by piece (downloads).
using Sink = std::function<void(const char*, std::size_t)>;

constexpr std::size_t kJsonLimit = 64 * 1024 * 1024;
constexpr std::size_t kPiece = 64 * 1024;

std::int64_t body_size(const std::vector<Part>& body) {
  std::int64_t n = 0;
  for (const auto& p : body) {
    n += p.file.empty() ? static_cast<std::int64_t>(p.text.size())
                        : static_cast<std::int64_t>(std::filesystem::file_size(p.file));
  }
  return n;
}

// One request and its answer on a connected stream; every read and write has a deadline.
template <class Stream>
asio::awaitable<void> exchange(Stream& stream, beast::tcp_stream& lowest, net::Url url,
                               std::string key, Request req, Reply* reply, Sink* sink) {
  http::request<http::empty_body> head{req.method, url.path_prefix + req.target, 11};
  head.set(http::field::host, url.host_header());
  head.set(http::field::user_agent, "fleetgate-batch/" FLEETGATE_VERSION);
  head.set(http::field::accept, "application/json");
  if (!key.empty()) {
    head.set(http::field::authorization, "Bearer " + key);
  }
  if (req.method != http::verb::get) {
    if (!req.content_type.empty()) {
      head.set(http::field::content_type, req.content_type);
    }
    head.content_length(body_size(req.body));
  }
  http::request_serializer<http::empty_body> serializer{head};
  lowest.expires_after(30s);
  co_await http::async_write_header(stream, serializer, use_awaitable);
  std::string piece(kPiece, '\0');
  for (const auto& part : req.body) {
    if (part.file.empty()) {
      lowest.expires_after(60s);
      co_await asio::async_write(stream, asio::buffer(part.text), use_awaitable);
      continue;
    }
    std::ifstream in(part.file, std::ios::binary);
    while (in) {
      in.read(piece.data(), static_cast<std::streamsize>(piece.size()));
      const auto n = static_cast<std::size_t>(in.gcount());
      if (n == 0) {
        break;
      }
      lowest.expires_after(60s);
      co_await asio::async_write(stream, asio::buffer(piece.data(), n), use_awaitable);
    }
    if (in.bad()) {
      throw Exit{kBatchLocalFile, "cannot read " + part.file};
    }
  }

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  lowest.expires_after(60s);
  co_await http::async_read_header(stream, buffer, parser, use_awaitable);
  reply->status = parser.get().result_int();
  const bool to_sink = sink != nullptr && reply->status == 200;
  while (!parser.is_done()) {
    parser.get().body().data = piece.data();
    parser.get().body().size = piece.size();
    lowest.expires_after(120s);
    auto [ec, n] = co_await http::async_read(stream, buffer, parser, asio::as_tuple(use_awaitable));
    if (ec == http::error::need_buffer) {
      ec = {};
    }
    if (ec) {
      throw boost::system::system_error(ec);
    }
    const std::size_t got = piece.size() - parser.get().body().size;
    reply->bytes += static_cast<std::int64_t>(got);
    if (to_sink) {
      (*sink)(piece.data(), got);
    } else if (reply->body.size() + got <= kJsonLimit) {
      reply->body.append(piece.data(), got);
    } else {
      throw Exit{kBatchCannotConnect, "the answer is larger than 64 MiB"};
    }
  }
}

asio::awaitable<void> connect_and_exchange(net::Url url, std::string key, Request req, Reply* reply,
                                           Sink* sink) {
  auto executor = co_await asio::this_coro::executor;
  tcp::resolver resolver(executor);
  const auto endpoints =
      co_await resolver.async_resolve(url.host, std::to_string(url.port), use_awaitable);
  if (!url.tls()) {
    beast::tcp_stream stream(executor);
    stream.expires_after(10s);
    co_await stream.async_connect(endpoints, use_awaitable);
    co_await exchange(stream, stream, url, key, std::move(req), reply, sink);
    co_return;
  }
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.set_default_verify_paths();
  ctx.set_verify_mode(asio::ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(executor, ctx);
  SSL_set_tlsext_host_name(stream.native_handle(), url.host.c_str());
  stream.set_verify_callback(asio::ssl::host_name_verification(url.host));
  auto& lowest = beast::get_lowest_layer(stream);
  lowest.expires_after(10s);
  co_await lowest.async_connect(endpoints, use_awaitable);
  lowest.expires_after(10s);
  co_await stream.async_handshake(asio::ssl::stream_base::client, use_awaitable);
  co_await exchange(stream, lowest, url, key, std::move(req), reply, sink);
}

class Client {
 public:
  Client(net::Url url, std::string key) : url_(std::move(url)), key_(std::move(key)) {}

  // One request. Throws Exit(kBatchCannotConnect) when there is no answer.
  Reply send(Request req, Sink* sink = nullptr) const {
    asio::io_context io;
    Reply reply;
    std::exception_ptr failure;
    asio::co_spawn(io, connect_and_exchange(url_, key_, std::move(req), &reply, sink),
                   [&failure](std::exception_ptr e) { failure = e; });
    io.run();
    if (failure) {
      try {
        std::rethrow_exception(failure);
      } catch (const boost::system::system_error& e) {
        throw Exit{kBatchCannotConnect,
                   "cannot reach " + url_.to_string() + ": " + e.code().message()};
      }
    }
    return reply;
  }

  // A JSON API call: the parsed answer of a 2xx; Exit with the right code otherwise.
  nlohmann::json call(http::verb method, const std::string& target,
                      const std::optional<nlohmann::json>& body = std::nullopt) const {
    Request req{method, target, "", {}};
    if (body) {
      req.content_type = "application/json";
      req.body.push_back({body->dump(), ""});
    }
    return parse(send(std::move(req)), target);
  }

  nlohmann::json parse(const Reply& reply, const std::string& target) const {
    check(reply, target);
    try {
      return nlohmann::json::parse(reply.body);
    } catch (const nlohmann::json::exception&) {
      throw Exit{kBatchCannotConnect, url_.to_string() + target +
                                          " did not answer with JSON (is this a fleetgate " +
                                          "gateway's public listener?)"};
    }
  }

  void check(const Reply& reply, const std::string& target) const {
    if (reply.status == 401 || reply.status == 403) {
      throw Exit{kBatchUnauthorized, url_.to_string() + " refused the API key (HTTP " +
                                         std::to_string(reply.status) + ": " +
                                         error_message(reply.body) + "); pass --api-key or set " +
                                         std::string(kApiKeyEnv)};
    }
    if (reply.status < 200 || reply.status >= 300) {
      throw Exit{kBatchApiError, target + ": HTTP " + std::to_string(reply.status) + ": " +
                                     error_message(reply.body)};
    }
  }

  const net::Url& url() const { return url_; }

 private:
  net::Url url_;
  std::string key_;
};

// An id in a path: anything but unreserved characters percent-encoded.
std::string path_segment(const std::string& id) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : id) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string random_boundary() {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof raw) != 1) {
    throw Exit{kBatchLocalFile, "no random bytes for the multipart boundary"};
  }
  std::string out = "----fleetgate-";
  for (unsigned char c : raw) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", c);
    out += hex;
  }
  return out;
}

// A filename for Content-Disposition: quotes, backslashes and control characters replaced.
std::string safe_filename(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  for (char& c : name) {
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) {
      c = '_';
    }
  }
  return name.empty() ? "input.jsonl" : name;
}

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

// Polls the batch until it ends, drawing the progress bar on stderr (redrawn in place on a
// terminal; elsewhere a line when something changed, at most every 5 s, and the last one).
int wait_for(const Client& client, const BatchArgs& args, const std::string& id) {
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  const auto start = Clock::now();
  const std::string target = "/v1/batches/" + path_segment(id);
  RateMeter meter;
  std::string last_line;
  auto last_print = start - 1h;
  std::optional<Clock::time_point> unreachable_since;
  for (;;) {
    nlohmann::json batch;
    try {
      batch = client.call(http::verb::get, target);
      unreachable_since.reset();
    } catch (const Exit& e) {
      // A gateway that restarts resumes the batch (docs/batch.md): keep asking for a minute.
      if (e.code != kBatchCannotConnect) {
        throw;
      }
      if (!unreachable_since) {
        unreachable_since = Clock::now();
      } else if (Clock::now() - *unreachable_since > 60s) {
        throw;
      }
      std::cerr << (tty ? "\r\x1b[K" : "") << e.message << "; retrying" << (tty ? "" : "\n")
                << std::flush;
      std::this_thread::sleep_for(args.poll_interval);
      continue;
    }
    Progress p = progress_of(batch);
    meter.add(since(start), p.done);
    p.rate = meter.per_second();
    const bool done = batch_is_terminal(p.status);
    const std::string line = render_progress(p);
    if (tty) {
      std::cerr << "\r\x1b[K" << line << (done ? "\n" : "") << std::flush;
    } else {
      const bool changed =
          line.substr(0, line.find("lines/s")) != last_line.substr(0, last_line.find("lines/s"));
      if (done || (changed && Clock::now() - last_print >= 5s) || last_line.empty()) {
        std::cerr << line << "\n" << std::flush;
        last_print = Clock::now();
      }
    }
    last_line = line;
    if (done) {
      std::cerr << "batch " << id << " " << p.status << ": " << (p.done - p.failed)
                << " succeeded, " << p.failed << " failed of " << p.total;
      const auto out = batch.value("output_file_id", nlohmann::json());
      if (out.is_string()) {
        std::cerr << "; fleetgate batch download " << id << " --out FILE";
      }
      std::cerr << "\n";
      return p.status == "completed" ? kBatchOk : kBatchNotCompleted;
    }
    std::this_thread::sleep_for(args.poll_interval);
  }
}

int submit(const Client& client, const BatchArgs& args) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(args.target, ec);
  if (ec || !std::filesystem::is_regular_file(args.target)) {
    throw Exit{kBatchLocalFile,
               "cannot read " + args.target + ": " + (ec ? ec.message() : "not a regular file")};
  }
  if (!std::ifstream(args.target, std::ios::binary)) {
    throw Exit{kBatchLocalFile, "cannot open " + args.target};
  }
  // A refused key is answered from the request's head, and the gateway stops reading soon after:
  // ask once with a small request, so a wrong key is a clear 401 rather than a broken upload.
  client.call(http::verb::get, "/v1/batches?limit=1");
  const std::string boundary = random_boundary();
  Request upload{http::verb::post, "/v1/files", "multipart/form-data; boundary=" + boundary, {}};
  upload.body.push_back(
      {"--" + boundary +
           "\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
           "batch\r\n--" +
           boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" +
           safe_filename(args.target) + "\"\r\nContent-Type: application/jsonl\r\n\r\n",
       ""});
  upload.body.push_back({"", args.target});
  upload.body.push_back({"\r\n--" + boundary + "--\r\n", ""});
  const auto file = client.parse(client.send(std::move(upload)), "/v1/files");
  const std::string file_id = file.value("id", std::string());
  if (file_id.empty()) {
    throw Exit{kBatchCannotConnect, "/v1/files answered without a file id"};
  }
  nlohmann::json create = {
      {"input_file_id", file_id}, {"endpoint", args.endpoint}, {"completion_window", args.window}};
  if (!args.metadata.empty()) {
    create["metadata"] = nlohmann::json::object();
    for (const auto& [k, v] : args.metadata) {
      create["metadata"][k] = v;
    }
  }
  const auto batch = client.call(http::verb::post, "/v1/batches", create);
  const std::string id = batch.value("id", std::string());
  if (id.empty()) {
    throw Exit{kBatchCannotConnect, "/v1/batches answered without a batch id"};
  }
  std::cerr << "uploaded " << args.target << " (" << size << " bytes) as " << file_id << "; batch "
            << id << " " << batch.value("status", std::string("?")) << "\n";
  std::cout << id << "\n" << std::flush;
  return args.wait ? wait_for(client, args, id) : kBatchOk;
}

int download(const Client& client, const BatchArgs& args) {
  std::string file_id = args.target;
  if (!args.target.starts_with("file-")) {
    const auto batch = client.call(http::verb::get, "/v1/batches/" + path_segment(args.target));
    const char* key = args.errors ? "error_file_id" : "output_file_id";
    const auto id = batch.value(key, nlohmann::json());
    if (!id.is_string() || id.get<std::string>().empty()) {
      const std::string status = batch.value("status", std::string("?"));
      throw Exit{kBatchApiError,
                 "batch " + args.target + " has no " + (args.errors ? "error" : "output") +
                     " file" +
                     (batch_is_terminal(status)
                          ? (args.errors ? " (no line failed)" : " (no line succeeded)")
                          : " yet (status " + status + ")")};
    }
    file_id = id.get<std::string>();
  }
  const std::string target = "/v1/files/" + path_segment(file_id) + "/content";
  std::ofstream out;
  const std::string partial = args.out + ".part";
  if (!args.out.empty()) {
    out.open(partial, std::ios::binary | std::ios::trunc);
    if (!out) {
      throw Exit{kBatchLocalFile, "cannot write " + partial};
    }
  }
  Sink sink = [&](const char* data, std::size_t n) {
    if (args.out.empty()) {
      std::cout.write(data, static_cast<std::streamsize>(n));
    } else {
      out.write(data, static_cast<std::streamsize>(n));
    }
  };
  Reply reply;
  try {
    reply = client.send(Request{http::verb::get, target, "", {}}, &sink);
    client.check(reply, target);
  } catch (...) {
    if (!args.out.empty()) {
      out.close();
      std::filesystem::remove(partial);
    }
    throw;
  }
  if (args.out.empty()) {
    std::cout.flush();
    return kBatchOk;
  }
  out.close();
  std::error_code ec;
  std::filesystem::rename(partial, args.out, ec);
  if (!out || ec) {
    throw Exit{kBatchLocalFile, "cannot write " + args.out + (ec ? ": " + ec.message() : "")};
  }
  std::cerr << "wrote " << reply.bytes << " bytes of " << file_id << " to " << args.out << "\n";
  return kBatchOk;
}

int run(const BatchArgs& args, const net::Url& url) {
  const Client client(url, args.api_key);
  switch (args.verb) {
    case BatchVerb::submit:
      return submit(client, args);
    case BatchVerb::wait:
      return wait_for(client, args, args.target);
    case BatchVerb::download:
      return download(client, args);
    case BatchVerb::status: {
      const auto batch = client.call(http::verb::get, "/v1/batches/" + path_segment(args.target));
      std::cout << (args.json ? batch.dump(2) + "\n" : render_batch(batch));
      return kBatchOk;
    }
    case BatchVerb::list: {
      std::string target = "/v1/batches?limit=" + std::to_string(args.limit);
      if (!args.after.empty()) {
        target += "&after=" + path_segment(args.after);
      }
      const auto list = client.call(http::verb::get, target);
      if (args.json) {
        std::cout << list.dump(2) << "\n";
      } else {
        try {
          std::cout << render_batch_list(list);
        } catch (const nlohmann::json::exception&) {
          throw Exit{kBatchCannotConnect, "/v1/batches did not answer with a list"};
        }
      }
      return kBatchOk;
    }
    case BatchVerb::cancel: {
      const auto batch =
          client.call(http::verb::post, "/v1/batches/" + path_segment(args.target) + "/cancel",
                      nlohmann::json::object());
      std::cout << batch.value("id", args.target) << " " << batch.value("status", std::string("?"))
                << "\n";
      return kBatchOk;
    }
  }
  return kBatchUsage;
}

}  // namespace

int run_batch_command(const std::vector<std::string>& args) {
  std::string error;
  const auto parsed = parse_batch_args(args, std::getenv(std::string(kGatewayUrlEnv).c_str()),
                                       std::getenv(std::string(kApiKeyEnv).c_str()), &error);
  if (!parsed) {
    std::cerr << "fleetgate batch: " << error << "\n" << batch_usage();
    return kBatchUsage;
  }
  if (parsed->help) {
    std::cout << batch_usage();
    return kBatchOk;
  }
  const auto url = net::parse_url(parsed->url, &error);
  if (!url) {
    std::cerr << "fleetgate batch: --url " << parsed->url << ": " << error << "\n";
    return kBatchUsage;
  }
  try {
    return run(*parsed, *url);
  } catch (const Exit& e) {
    std::cerr << "fleetgate batch: " << e.message << "\n";
    return e.code;
  } catch (const nlohmann::json::exception& e) {
    std::cerr << "fleetgate batch: unexpected answer from " << url->to_string() << ": " << e.what()
              << "\n";
    return kBatchCannotConnect;
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "fleetgate batch: " << e.what() << "\n";
    return kBatchLocalFile;
  }
}

}  // namespace fg::cli
