#include "orchestrator/cli/batch_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "common/util/duration.hpp"

namespace fg::cli {
namespace {

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

std::int64_t count(const nlohmann::json& counts, const char* key) {
  if (!counts.is_object() || !counts.contains(key) || !counts.at(key).is_number()) {
    return 0;
  }
  return counts.at(key).get<std::int64_t>();
}

std::string string_field(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_string()) {
    return "";
  }
  return j.at(key).get<std::string>();
}

// One line, whatever a server sent.
std::string one_line(std::string s) {
  std::replace_if(
      s.begin(), s.end(), [](char c) { return c == '\n' || c == '\r' || c == '\t'; }, ' ');
  return s;
}

bool parse_int(const std::string& s, int* out) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), ::isdigit)) {
    return false;
  }
  *out = std::stoi(s);
  return true;
}

}  // namespace

std::optional<BatchArgs> parse_batch_args(const std::vector<std::string>& args, const char* env_url,
                                          const char* env_key, std::string* error) {
  BatchArgs out;
  if (env_url != nullptr && *env_url != '\0') {
    out.url = env_url;
  }
  if (env_key != nullptr) {
    out.api_key = env_key;
  }
  std::vector<std::string> positional;
  bool saw_limit = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "--help" || a == "-h") {
      out.help = true;
      return out;
    }
    if (a == "--wait") {
      out.wait = true;
    } else if (a == "--json") {
      out.json = true;
    } else if (a == "--errors") {
      out.errors = true;
    } else if (a == "--url" || a == "--api-key" || a == "--endpoint" || a == "--window" ||
               a == "--out" || a == "--after" || a == "--limit" || a == "--metadata" ||
               a == "--poll-interval") {
      if (!has_value) {
        *error = a + " needs a value";
        return std::nullopt;
      }
      const std::string& v = args[++i];
      if (a == "--url") {
        out.url = v;
      } else if (a == "--api-key") {
        out.api_key = v;
      } else if (a == "--endpoint") {
        if (!v.starts_with("/v1/")) {
          *error = "--endpoint must be a /v1/ path such as /v1/chat/completions, not '" + v + "'";
          return std::nullopt;
        }
        out.endpoint = v;
      } else if (a == "--window") {
        out.window = v;
      } else if (a == "--out") {
        out.out = v;
      } else if (a == "--after") {
        out.after = v;
      } else if (a == "--limit") {
        if (!parse_int(v, &out.limit) || out.limit < 1 || out.limit > 100) {
          *error = "--limit must be a whole number from 1 to 100, not '" + v + "'";
          return std::nullopt;
        }
        saw_limit = true;
      } else if (a == "--metadata") {
        const auto eq = v.find('=');
        if (eq == std::string::npos || eq == 0) {
          *error = "--metadata takes key=value, not '" + v + "'";
          return std::nullopt;
        }
        out.metadata.emplace_back(v.substr(0, eq), v.substr(eq + 1));
      } else {
        const auto d = parse_duration(v);
        if (!d || d->count() < 10) {
          *error =
              "--poll-interval must be a duration of at least 10ms such as 500ms or 2s, not '" + v +
              "'";
          return std::nullopt;
        }
        out.poll_interval = *d;
      }
    } else if (a.starts_with("-") && a != "-") {
      *error = "unknown argument '" + a + "'";
      return std::nullopt;
    } else {
      positional.push_back(a);
    }
  }
  if (positional.empty()) {
    *error = "missing command (submit, status, list, cancel, wait or download)";
    return std::nullopt;
  }
  const std::string& verb = positional[0];
  const std::size_t want = verb == "list" ? 1 : 2;
  if (verb == "submit") {
    out.verb = BatchVerb::submit;
  } else if (verb == "status") {
    out.verb = BatchVerb::status;
  } else if (verb == "list") {
    out.verb = BatchVerb::list;
  } else if (verb == "cancel") {
    out.verb = BatchVerb::cancel;
  } else if (verb == "wait") {
    out.verb = BatchVerb::wait;
  } else if (verb == "download") {
    out.verb = BatchVerb::download;
  } else {
    *error = "unknown command '" + verb + "' (submit, status, list, cancel, wait or download)";
    return std::nullopt;
  }
  if (positional.size() != want) {
    *error = verb == "submit" ? "submit takes one JSONL file"
             : verb == "list" ? "list takes no other argument, got '" + positional[1] + "'"
                              : verb + " takes one batch id";
    return std::nullopt;
  }
  if (want == 2) {
    out.target = positional[1];
  }
  // Flags that belong to one command are refused elsewhere, so a typo does not pass unnoticed.
  if (out.wait && out.verb != BatchVerb::submit) {
    *error = "--wait is for submit (use `fleetgate batch wait ID` for an existing batch)";
    return std::nullopt;
  }
  if ((out.errors || !out.out.empty()) && out.verb != BatchVerb::download) {
    *error = "--out and --errors are for download";
    return std::nullopt;
  }
  if ((saw_limit || !out.after.empty()) && out.verb != BatchVerb::list) {
    *error = "--limit and --after are for list";
    return std::nullopt;
  }
  if (out.json && out.verb != BatchVerb::status && out.verb != BatchVerb::list) {
    *error = "--json is for status and list";
    return std::nullopt;
  }
  return out;
}

std::string batch_usage() {
  return "usage: fleetgate batch [--url URL] [--api-key KEY] COMMAND\n"
         "  submit FILE.jsonl [--endpoint PATH] [--window 24h] [--metadata K=V]... [--wait]\n"
         "                    upload the file and create a batch; prints the batch id\n"
         "  status ID [--json]      the batch's status, counts, files and errors\n"
         "  list [--limit N] [--after ID] [--json]\n"
         "                          your batches, newest first\n"
         "  cancel ID               cancel a batch\n"
         "  wait ID                 show a live progress bar until the batch ends\n"
         "  download ID [--out FILE] [--errors]\n"
         "                          the output file (--errors: the error file) of a batch, or a\n"
         "                          file by its id (file-...); to stdout without --out\n"
         "  --url URL               the gateway (default $FLEETGATE_URL, else "
         "http://127.0.0.1:8080)\n"
         "  --api-key KEY           an API key of the gateway (default $FLEETGATE_API_KEY)\n"
         "  --endpoint PATH         the batch's endpoint (default /v1/chat/completions)\n"
         "  --poll-interval D       how often --wait and wait ask (default 1s)\n"
         "exit codes: 0 done (with --wait or wait: the batch completed), 1 it ended failed,\n"
         "expired or cancelled, 2 bad arguments, 3 cannot connect, 4 unauthorized, 5 refused\n"
         "by the gateway, 6 a local file cannot be read or written\n";
}

void RateMeter::add(std::chrono::milliseconds now, std::int64_t done) {
  samples_.emplace_back(now, done);
  // Keep one sample at or before the window's start, so the rate spans the whole window.
  while (samples_.size() > 2 && now - samples_[1].first >= window_) {
    samples_.pop_front();
  }
}

std::optional<double> RateMeter::per_second() const {
  if (samples_.size() < 2) {
    return std::nullopt;
  }
  const auto& [t0, d0] = samples_.front();
  const auto& [t1, d1] = samples_.back();
  if (t1 - t0 < std::chrono::milliseconds(1)) {
    return std::nullopt;
  }
  return static_cast<double>(d1 - d0) * 1000.0 / static_cast<double>((t1 - t0).count());
}

std::string format_eta(std::optional<double> seconds) {
  if (!seconds || !std::isfinite(*seconds) || *seconds < 0 || *seconds > 360000.0 * 24) {
    return "--";
  }
  const auto s = static_cast<long long>(std::ceil(*seconds));
  char buf[64];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  }
  return buf;
}

std::string render_progress(const Progress& p, int bar_width) {
  const double fraction =
      p.total > 0 ? std::clamp(static_cast<double>(p.done) / static_cast<double>(p.total), 0.0, 1.0)
                  : 0.0;
  const int filled = static_cast<int>(std::floor(fraction * bar_width));
  std::string line = "[" + std::string(filled, '#') + std::string(bar_width - filled, ' ') + "]  ";
  line += std::to_string(p.done) + "/" + std::to_string(p.total) + "  " +
          fixed(fraction * 100.0, 1) + "%  ";
  line += p.rate ? fixed(*p.rate, 1) + " lines/s" : "-- lines/s";
  std::optional<double> eta;
  if (p.done >= p.total && p.total > 0) {
    eta = 0;
  } else if (p.rate && *p.rate > 0) {
    eta = static_cast<double>(p.total - p.done) / *p.rate;
  }
  line += "  ETA " + format_eta(eta) + "  " + p.status;
  if (p.failed > 0) {
    line += "  " + std::to_string(p.failed) + " failed";
  }
  return line;
}

Progress progress_of(const nlohmann::json& batch) {
  Progress p;
  p.status = string_field(batch, "status");
  const auto counts = batch.is_object() && batch.contains("request_counts")
                          ? batch.at("request_counts")
                          : nlohmann::json();
  p.total = count(counts, "total");
  p.failed = count(counts, "failed");
  p.done = count(counts, "completed") + p.failed;
  return p;
}

bool batch_is_terminal(std::string_view status) {
  return status == "completed" || status == "failed" || status == "expired" ||
         status == "cancelled";
}

std::string format_unix_time(const nlohmann::json& seconds) {
  if (!seconds.is_number() || seconds.get<double>() <= 0) {
    return "-";
  }
  const std::time_t t = static_cast<std::time_t>(seconds.get<double>());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string render_batch(const nlohmann::json& batch) {
  const Progress p = progress_of(batch);
  auto field = [&](const char* key) {
    const std::string v = string_field(batch, key);
    return v.empty() ? std::string("-") : one_line(v);
  };
  std::string out;
  out += "id:            " + field("id") + "\n";
  out += "status:        " + field("status") + "\n";
  out += "endpoint:      " + field("endpoint") + "\n";
  out += "input file:    " + field("input_file_id") + "\n";
  out += "requests:      " + std::to_string(p.done) + "/" + std::to_string(p.total) + " done, " +
         std::to_string(p.failed) + " failed\n";
  out += "output file:   " + field("output_file_id") + "\n";
  out += "error file:    " + field("error_file_id") + "\n";
  out += "created:       " + format_unix_time(batch.value("created_at", nlohmann::json())) + "\n";
  out += "expires:       " + format_unix_time(batch.value("expires_at", nlohmann::json())) + "\n";
  for (const char* when : {"completed_at", "failed_at", "expired_at", "cancelled_at"}) {
    if (batch.contains(when) && batch.at(when).is_number()) {
      std::string label = std::string(when).substr(0, std::string(when).find('_')) + ":";
      label.resize(15, ' ');
      out += label + format_unix_time(batch.at(when)) + "\n";
    }
  }
  const auto errors = batch.value("errors", nlohmann::json());
  if (errors.is_object() && errors.contains("data") && errors.at("data").is_array() &&
      !errors.at("data").empty()) {
    out += "errors:\n";
    for (const auto& e : errors.at("data")) {
      std::string where = e.contains("line") && e.at("line").is_number()
                              ? "line " + std::to_string(e.at("line").get<long long>()) + ": "
                              : "";
      out += "  " + where + one_line(string_field(e, "code")) + ": " +
             one_line(string_field(e, "message")) + "\n";
    }
  }
  return out;
}

std::string render_batch_list(const nlohmann::json& list) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"ID", "STATUS", "DONE", "FAILED", "CREATED", "ENDPOINT"});
  for (const auto& b : list.at("data")) {
    const Progress p = progress_of(b);
    rows.push_back({one_line(string_field(b, "id")), one_line(p.status),
                    std::to_string(p.done) + "/" + std::to_string(p.total),
                    std::to_string(p.failed),
                    format_unix_time(b.value("created_at", nlohmann::json())),
                    one_line(string_field(b, "endpoint"))});
  }
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (std::size_t i = 0; i < r.size(); ++i) {
      width[i] = std::max(width[i], r[i].size());
    }
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      const bool numeric = i == 2 || i == 3;
      const std::string pad(width[i] - r[i].size(), ' ');
      line += numeric ? pad + r[i] : r[i] + (i + 1 < r.size() ? pad : "");
      if (i + 1 < r.size()) {
        line += "  ";
      }
    }
    out += line + "\n";
  }
  if (list.value("has_more", false)) {
    out += "(more: --after " + string_field(list, "last_id") + ")\n";
  }
  return out;
}

std::string error_message(std::string_view body) {
  try {
    const auto j = nlohmann::json::parse(body);
    if (j.is_object() && j.contains("error") && j.at("error").is_object()) {
      const std::string m = string_field(j.at("error"), "message");
      if (!m.empty()) {
        return one_line(m);
      }
    }
  } catch (const nlohmann::json::exception&) {
    // Not JSON: show its start.
  }
  return one_line(std::string(body.substr(0, 200)));
}

}  // namespace fg::cli
