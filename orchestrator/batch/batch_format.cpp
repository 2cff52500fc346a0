#include "orchestrator/batch/batch_format.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

#include "common/util/duration.hpp"

namespace fg::batch {

using nlohmann::json;

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// The value of parameter `name` in a header value such as `form-data; name="file"`.
std::optional<std::string> header_param(std::string_view value, std::string_view name) {
  std::size_t pos = 0;
  while (pos < value.size()) {
    std::size_t semi = value.find(';', pos);
    std::string_view part =
        trim(value.substr(pos, semi == std::string_view::npos ? value.npos : semi - pos));
    pos = semi == std::string_view::npos ? value.size() : semi + 1;
    std::size_t eq = part.find('=');
    if (eq == std::string_view::npos || lower(trim(part.substr(0, eq))) != name) {
      continue;
    }
    std::string_view v = trim(part.substr(eq + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
      v = v.substr(1, v.size() - 2);
    }
    return std::string(v);
  }
  return std::nullopt;
}

// A part's header block (the lines before its blank line): the name and filename of its
// Content-Disposition; false when it has none. Shared by the whole-body and streaming parsers.
bool read_part_head(std::string_view head, std::string* name, std::string* filename) {
  bool has_disposition = false;
  while (!head.empty()) {
    std::size_t eol = head.find("\r\n");
    std::string_view line = head.substr(0, eol);
    head = eol == std::string_view::npos ? std::string_view() : head.substr(eol + 2);
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      continue;
    }
    if (lower(trim(line.substr(0, colon))) == "content-disposition") {
      std::string_view value = line.substr(colon + 1);
      has_disposition = true;
      *name = header_param(value, "name").value_or("");
      *filename = header_param(value, "filename").value_or("");
    }
  }
  return has_disposition;
}

}  // namespace

std::variant<std::vector<MultipartPart>, std::string> parse_multipart(std::string_view content_type,
                                                                      std::string_view body) {
  if (lower(trim(content_type.substr(0, content_type.find(';')))) != "multipart/form-data") {
    return std::string("expected Content-Type multipart/form-data");
  }
  auto boundary = header_param(content_type, "boundary");
  if (!boundary || boundary->empty() || boundary->size() > 200) {
    return std::string("the multipart Content-Type has no boundary");
  }
  const std::string delimiter = "--" + *boundary;
  std::vector<MultipartPart> parts;
  std::size_t pos = body.find(delimiter);
  if (pos == std::string_view::npos) {
    return std::string("the multipart body has no part");
  }
  for (;;) {
    pos += delimiter.size();
    if (body.substr(pos, 2) == "--") {
      return parts;  // the closing delimiter
    }
    if (body.substr(pos, 2) != "\r\n") {
      return std::string("malformed multipart delimiter line");
    }
    pos += 2;
    std::size_t head_end = body.find("\r\n\r\n", pos);
    if (head_end == std::string_view::npos) {
      return std::string("a multipart part has no header end");
    }
    MultipartPart part;
    const bool has_disposition =
        read_part_head(body.substr(pos, head_end - pos), &part.name, &part.filename);
    if (!has_disposition) {
      return std::string("a multipart part has no Content-Disposition");
    }
    std::size_t data_start = head_end + 4;
    std::size_t next = body.find("\r\n" + delimiter, data_start);
    if (next == std::string_view::npos) {
      return std::string("the multipart body ends before its closing boundary");
    }
    part.data = body.substr(data_start, next - data_start);
    parts.push_back(std::move(part));
    pos = next + 2;
  }
}

MultipartBoundary multipart_boundary(std::string_view content_type) {
  if (lower(trim(content_type.substr(0, content_type.find(';')))) != "multipart/form-data") {
    return {std::nullopt, "expected Content-Type multipart/form-data"};
  }
  auto boundary = header_param(content_type, "boundary");
  if (!boundary || boundary->empty() || boundary->size() > 200) {
    return {std::nullopt, "the multipart Content-Type has no boundary"};
  }
  return {boundary, ""};
}

MultipartStream::MultipartStream(std::string boundary, Handler handler)
    : delimiter_("\r\n--" + boundary), handler_(std::move(handler)) {
  buf_ = "\r\n";  // the first delimiter has no line break before it: give it one
}

std::optional<std::string> MultipartStream::feed(std::string_view piece) {
  if (state_ == State::failed) {
    return std::string("the multipart body was already refused");
  }
  if (state_ == State::done) {
    return std::nullopt;  // the epilogue after the closing delimiter is ignored
  }
  buf_.append(piece);
  for (;;) {
    bool progressed = false;
    if (auto problem = step(progressed)) {
      state_ = State::failed;
      buf_.clear();
      return problem;
    }
    if (!progressed || state_ == State::done) {
      if (state_ == State::done) {
        buf_.clear();
      }
      return std::nullopt;
    }
  }
}

std::optional<std::string> MultipartStream::step(bool& progressed) {
  // Bytes at the end of buf_ that may begin a delimiter and must wait for more input.
  const std::size_t keep = delimiter_.size() - 1;
  switch (state_) {
    case State::preamble: {
      std::size_t at = buf_.find(delimiter_);
      if (at == std::string::npos) {
        if (buf_.size() > keep) {
          buf_.erase(0, buf_.size() - keep);
        }
        return std::nullopt;
      }
      buf_.erase(0, at + delimiter_.size());
      state_ = State::after_delimiter;
      progressed = true;
      return std::nullopt;
    }
    case State::after_delimiter: {
      if (buf_.size() < 2) {
        return std::nullopt;
      }
      if (buf_.compare(0, 2, "--") == 0) {
        if (parts_ == 0) {
          return std::string("the multipart body has no part");
        }
        state_ = State::done;
      } else if (buf_.compare(0, 2, "\r\n") == 0) {
        buf_.erase(0, 2);
        state_ = State::headers;
      } else {
        return std::string("malformed multipart delimiter line");
      }
      progressed = true;
      return std::nullopt;
    }
    case State::headers: {
      std::size_t head_end = buf_.find("\r\n\r\n");
      if (head_end == std::string::npos) {
        if (buf_.size() > kMaxHeaderBytes) {
          return std::string("a multipart part has no header end");
        }
        return std::nullopt;
      }
      std::string name, filename;
      const bool has_disposition =
          read_part_head(std::string_view(buf_.data(), head_end), &name, &filename);
      if (!has_disposition) {
        return std::string("a multipart part has no Content-Disposition");
      }
      buf_.erase(0, head_end + 4);
      ++parts_;
      if (handler_.on_part) {
        handler_.on_part(name, filename);
      }
      state_ = State::data;
      progressed = true;
      return std::nullopt;
    }
    case State::data: {
      std::size_t at = buf_.find(delimiter_);
      if (at == std::string::npos) {
        if (buf_.size() > keep) {
          if (handler_.on_data) {
            handler_.on_data(std::string_view(buf_.data(), buf_.size() - keep));
          }
          buf_.erase(0, buf_.size() - keep);
        }
        return std::nullopt;
      }
      if (at > 0 && handler_.on_data) {
        handler_.on_data(std::string_view(buf_.data(), at));
      }
      if (handler_.on_part_end) {
        handler_.on_part_end();
      }
      buf_.erase(0, at + delimiter_.size());
      state_ = State::after_delimiter;
      progressed = true;
      return std::nullopt;
    }
    case State::done:
    case State::failed:
      return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::string> MultipartStream::finish() const {
  switch (state_) {
    case State::done:
      return std::nullopt;
    case State::preamble:
      return std::string("the multipart body has no part");
    case State::headers:
      return std::string("a multipart part has no header end");
    default:
      return std::string("the multipart body ends before its closing boundary");
  }
}

UploadReader::UploadReader(std::string boundary, Limits limits,
                           std::function<void(std::string chunk)> on_chunk)
    : limits_(limits),
      on_chunk_(std::move(on_chunk)),
      stream_(
          std::move(boundary),
          {[this](const std::string& name, const std::string& filename) {
             if (name == "file") {
               two_files_ = two_files_ || seen_file_;
               seen_file_ = true;
               filename_ = filename;
               in_ = In::file;
             } else if (name == "purpose") {
               purpose_.clear();
               in_ = In::purpose;
             } else {
               in_ = In::other;  // other fields are ignored, as OpenAI does
             }
           },
           [this](std::string_view piece) {
             if (in_ == In::purpose) {
               if (purpose_.size() < 64) {
                 purpose_.append(piece.substr(0, 64 - purpose_.size()));
               }
               return;
             }
             if (in_ != In::file || two_files_ || piece.empty()) {
               return;
             }
             bytes_ += piece.size();
             if (bytes_ > limits_.max_bytes) {
               return;  // over_limit says so; nothing more is kept
             }
             newlines_ += static_cast<std::uint64_t>(std::count(piece.begin(), piece.end(), '\n'));
             ends_with_newline_ = piece.back() == '\n';
             while (!piece.empty()) {
               const std::size_t take = std::min(piece.size(), limits_.chunk_bytes - chunk_.size());
               chunk_.append(piece.substr(0, take));
               piece.remove_prefix(take);
               if (chunk_.size() == limits_.chunk_bytes) {
                 on_chunk_(std::exchange(chunk_, std::string()));
               }
             }
           },
           [this] { in_ = In::none; }}) {}

std::optional<UploadReader::Error> UploadReader::over_limit() const {
  if (two_files_) {
    return Error{400, "invalid_request", "the multipart body has more than one 'file' part",
                 "file"};
  }
  if (bytes_ > limits_.max_bytes) {
    return Error{
        413, "file_too_large",
        "the file is over batch.max_file_bytes (" + std::to_string(limits_.max_bytes) + " bytes)",
        "file"};
  }
  if (newlines_ > limits_.max_lines) {
    return Error{413, "file_too_large",
                 "the file has more than batch.max_file_lines (" +
                     std::to_string(limits_.max_lines) + ") lines",
                 "file"};
  }
  return std::nullopt;
}

std::optional<UploadReader::Error> UploadReader::feed(std::string_view piece) {
  if (auto problem = stream_.feed(piece)) {
    return Error{400, "invalid_request", *problem, {}};
  }
  return over_limit();
}

std::optional<UploadReader::Error> UploadReader::finish() {
  if (auto problem = stream_.finish()) {
    return Error{400, "invalid_request", *problem, {}};
  }
  if (auto problem = over_limit()) {
    return problem;
  }
  if (lines() > limits_.max_lines) {
    return Error{413, "file_too_large",
                 "the file has more than batch.max_file_lines (" +
                     std::to_string(limits_.max_lines) + ") lines",
                 "file"};
  }
  if (purpose_ != "batch") {
    return Error{400, "invalid_request",
                 "purpose must be 'batch' (the only purpose this gateway keeps)", "purpose"};
  }
  if (!seen_file_) {
    return Error{400, "invalid_request", "the multipart body has no 'file' part", "file"};
  }
  if (!chunk_.empty()) {
    on_chunk_(std::exchange(chunk_, std::string()));
  }
  return std::nullopt;
}

std::vector<std::string> LineSplitter::feed(std::string_view piece) {
  std::vector<std::string> lines;
  for (;;) {
    std::size_t nl = piece.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(piece);
      return lines;
    }
    partial_.append(piece.substr(0, nl));
    if (!partial_.empty() && partial_.back() == '\r') {
      partial_.pop_back();
    }
    lines.push_back(std::move(partial_));
    partial_.clear();
    piece.remove_prefix(nl + 1);
  }
}

std::optional<std::string> LineSplitter::finish() {
  if (partial_.empty()) {
    return std::nullopt;
  }
  std::string last = std::move(partial_);
  partial_.clear();
  if (!last.empty() && last.back() == '\r') {
    last.pop_back();
  }
  return last;
}

std::variant<std::monostate, storage::LineInput, LineError> LineValidator::check(
    std::string_view text, std::int64_t line_no) {
  if (trim(text).empty()) {
    return std::monostate{};
  }
  auto fail = [&](std::string code, std::string message, std::string param = {}) {
    return LineError{std::move(code), std::move(message), std::move(param), line_no};
  };
  json line = json::parse(text, nullptr, false);
  if (line.is_discarded() || !line.is_object()) {
    return fail("invalid_json_line",
                "This line is not parseable as valid JSON (one JSON object per line).");
  }
  auto custom_id = line.find("custom_id");
  if (custom_id == line.end() || !custom_id->is_string() ||
      custom_id->get_ref<const std::string&>().empty()) {
    return fail("missing_required_parameter",
                "Each request must have a custom_id: a non-empty string.", "custom_id");
  }
  const std::string& id = custom_id->get_ref<const std::string&>();
  if (seen_.contains(id)) {
    return fail("duplicate_custom_id",
                "The custom_id for this request is a duplicate of another request. The custom_id "
                "parameter must be unique for each request in a batch.",
                "custom_id");
  }
  auto method = line.find("method");
  if (method == line.end() || !method->is_string() || *method != "POST") {
    return fail("invalid_method", "The method of each request must be POST.", "method");
  }
  auto url = line.find("url");
  if (url == line.end() || !url->is_string() || *url != endpoint_) {
    return fail(
        "invalid_url",
        "The URL provided for this request does not match the batch endpoint (" + endpoint_ + ").",
        "url");
  }
  auto body = line.find("body");
  if (body == line.end() || !body->is_object()) {
    return fail("invalid_request", "The body of each request must be a JSON object.", "body");
  }
  auto model = body->find("model");
  if (model == body->end() || !model->is_string()) {
    return fail("missing_required_parameter", "The body of each request must name a model.",
                "body.model");
  }
  const std::string& model_name = model->get_ref<const std::string&>();
  if (!model_exists_(model_name)) {
    return fail("model_not_found", "The model '" + model_name + "' does not exist on this gateway.",
                "body.model");
  }
  if (auto stream = body->find("stream"); stream != body->end() && *stream == true) {
    return fail("invalid_request", "Batch requests cannot stream (body.stream must be false).",
                "body.stream");
  }
  seen_.insert(id);
  storage::LineInput input;
  input.line_no = accepted_++;
  input.custom_id = id;
  input.model = model_name;
  input.body = body->dump();
  return input;
}

json file_json(const storage::FileRecord& file) {
  return {{"id", file.id},
          {"object", "file"},
          {"bytes", file.bytes},
          {"created_at", file.created_at / 1000},
          {"filename", file.filename},
          {"purpose", file.purpose},
          {"status", "processed"},
          {"expires_at", nullptr},
          {"status_details", nullptr}};
}

namespace {
json seconds_or_null(storage::UnixMs at) {
  return at == 0 ? json(nullptr) : json(at / 1000);
}
json id_or_null(const std::string& id) {
  return id.empty() ? json(nullptr) : json(id);
}
}  // namespace

json batch_json(const storage::BatchRecord& b, const storage::LineCounts& counts) {
  json metadata = json::parse(b.metadata_json, nullptr, false);
  json errors = json::parse(b.errors_json, nullptr, false);
  return {{"id", b.id},
          {"object", "batch"},
          {"endpoint", b.endpoint},
          {"errors", errors.is_discarded() ? json(nullptr) : errors},
          {"input_file_id", b.input_file_id},
          {"completion_window", b.completion_window},
          {"status", storage::to_string(b.status)},
          {"output_file_id", id_or_null(b.output_file_id)},
          {"error_file_id", id_or_null(b.error_file_id)},
          {"created_at", b.created_at / 1000},
          {"in_progress_at", seconds_or_null(b.in_progress_at)},
          {"expires_at", seconds_or_null(b.expires_at)},
          {"finalizing_at", seconds_or_null(b.finalizing_at)},
          {"completed_at", seconds_or_null(b.completed_at)},
          {"failed_at", seconds_or_null(b.failed_at)},
          {"expired_at", seconds_or_null(b.expired_at)},
          {"cancelling_at", seconds_or_null(b.cancelling_at)},
          {"cancelled_at", seconds_or_null(b.cancelled_at)},
          {"request_counts",
           {{"total", counts.total()}, {"completed", counts.succeeded}, {"failed", counts.failed}}},
          {"metadata", metadata.is_discarded() ? json(nullptr) : metadata}};
}

json errors_json(const std::vector<LineError>& errors) {
  json data = json::array();
  for (const auto& e : errors) {
    data.push_back({{"code", e.code},
                    {"message", e.message},
                    {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                    {"line", e.line == 0 ? json(nullptr) : json(e.line)}});
  }
  return {{"object", "list"}, {"data", std::move(data)}};
}

std::string output_line(const std::string& id, const std::string& custom_id, unsigned status,
                        const std::string& request_id, std::string_view body) {
  json parsed = json::parse(body, nullptr, false);
  json line = {{"id", id},
               {"custom_id", custom_id},
               {"response",
                {{"status_code", status},
                 {"request_id", request_id},
                 {"body", parsed.is_discarded() ? json(std::string(body)) : parsed}}},
               {"error", nullptr}};
  return line.dump();
}

std::string error_line(const std::string& id, const std::string& custom_id, const std::string& code,
                       const std::string& message) {
  json line = {{"id", id},
               {"custom_id", custom_id},
               {"response", nullptr},
               {"error", {{"code", code}, {"message", message}}}};
  return line.dump();
}

std::optional<std::int64_t> parse_completion_window(std::string_view window) {
  auto d = parse_duration(window);
  if (!d || d->count() <= 0) {
    return std::nullopt;
  }
  return d->count();
}

bool batch_endpoint_supported(std::string_view endpoint) {
  return endpoint == "/v1/chat/completions" || endpoint == "/v1/completions" ||
         endpoint == "/v1/embeddings" || endpoint == "/v1/responses";
}

}  // namespace fg::batch
