#include "orchestrator/cli/status_report.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace fg::cli {
namespace {

using Row = std::vector<std::string>;

std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

std::string text_of(const nlohmann::json& v) {
  if (v.is_null()) {
    return "-";
  }
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    // One line per row, whatever a reason holds.
    std::replace_if(
        s.begin(), s.end(), [](char c) { return c == '\n' || c == '\r' || c == '\t'; }, ' ');
    return s.empty() ? "-" : s;
  }
  return v.dump();
}

bool model_ok(const nlohmann::json& m) {
  return m.at("healthy").get<long long>() >= m.at("desired").get<long long>();
}

// Left-aligned columns, except those listed in numeric (right-aligned), two spaces apart.
std::string table(const Row& head, const std::vector<Row>& rows, const std::vector<bool>& numeric) {
  std::vector<std::size_t> width(head.size());
  for (std::size_t i = 0; i < head.size(); ++i) {
    width[i] = head[i].size();
    for (const auto& r : rows) {
      width[i] = std::max(width[i], r[i].size());
    }
  }
  std::string out;
  auto line = [&](const Row& r) {
    std::string l;
    for (std::size_t i = 0; i < r.size(); ++i) {
      const std::string pad(width[i] - r[i].size(), ' ');
      l += numeric[i] ? pad + r[i] : r[i] + (i + 1 < r.size() ? pad : "");
      if (i + 1 < r.size()) {
        l += "  ";
      }
    }
    while (!l.empty() && l.back() == ' ') {
      l.pop_back();
    }
    out += l + '\n';
  };
  line(head);
  for (const auto& r : rows) {
    line(r);
  }
  return out;
}

}  // namespace

std::optional<StatusArgs> parse_status_args(const std::vector<std::string>& args,
                                            const char* env_token, std::string* error) {
  StatusArgs out;
  if (env_token != nullptr) {
    out.token = env_token;
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if ((a == "--admin" || a == "--token") && i + 1 < args.size()) {
      (a == "--admin" ? out.admin_url : out.token) = args[++i];
    } else if (a == "--watch") {
      out.watch = true;
    } else if (a == "--help" || a == "-h") {
      out.help = true;
    } else {
      *error = "unknown or incomplete argument '" + a + "'";
      return std::nullopt;
    }
  }
  return out;
}

std::string status_usage() {
  return "usage: fleetgate status [--admin URL] [--token TOKEN] [--watch]\n"
         "  --admin URL    the gateway's admin listener (default http://127.0.0.1:9090)\n"
         "  --token TOKEN  the admin token (default: $FLEETGATE_ADMIN_TOKEN)\n"
         "  --watch        redraw every second until interrupted\n"
         "exit codes: 0 every model has its desired healthy replicas, 1 degraded, 2 bad\n"
         "arguments, 3 cannot connect (or not a fleetgate admin listener), 4 unauthorized\n";
}

std::string render_status(const nlohmann::json& status) {
  std::vector<Row> models;
  for (const auto& m : status.at("models")) {
    const long long busy = m.at("busy_slots").get<long long>();
    models.push_back(
        {m.at("model").get<std::string>(),
         !model_ok(m) ? (m.at("healthy").get<long long>() == 0 ? "DOWN" : "DEGRADED") : "ok",
         std::to_string(m.at("healthy").get<long long>()) + "/" +
             std::to_string(m.at("desired").get<long long>()),
         std::to_string(m.at("registered").get<long long>()),
         std::to_string(busy) + "/" + std::to_string(busy + m.at("free_slots").get<long long>()),
         std::to_string(m.at("queue_depth").get<long long>()),
         fixed(m.value("requests_per_second", 0.0), 1),
         fixed(m.value("tokens_per_second", 0.0), 0)});
  }
  std::vector<Row> phones;
  for (const auto& r : status.at("replicas")) {
    std::string state = r.at("state").get<std::string>();
    if (r.value("removing", false)) {
      state += " (removing)";
    }
    phones.push_back(
        {r.at("id").get<std::string>(), r.at("model").get<std::string>(), state,
         std::to_string(r.at("in_flight").get<long long>()) + "/" +
             std::to_string(r.at("slots").get<long long>()),
         std::to_string(r.at("requests").get<long long>()),
         std::to_string(r.at("failures").get<long long>()), r.at("url").get<std::string>(),
         text_of(r.contains("state_reason") ? r.at("state_reason") : nlohmann::json())});
  }
  std::string out = "fleetgate " + status.value("version", std::string("?")) + " at " +
                    status.value("time", std::string("?")) + ": " +
                    (status_exit_code(status) == kStatusOk ? "ok" : "DEGRADED") + "\n\n";
  out += table({"MODEL", "STATE", "HEALTHY", "REGISTERED", "SLOTS", "QUEUE", "REQ/S", "TOK/S"},
               models, {false, false, true, true, true, true, true, true});
  out += '\n';
  out += table({"PHONE", "MODEL", "STATE", "SLOTS", "REQUESTS", "FAILURES", "URL", "WHY"}, phones,
               {false, false, false, true, true, true, false, false});
  return out;
}

int status_exit_code(const nlohmann::json& status) {
  for (const auto& m : status.at("models")) {
    if (!model_ok(m)) {
      return kStatusDegraded;
    }
  }
  return kStatusOk;
}

}  // namespace fg::cli
