#include "replica-agent/agent/options.hpp"

#include <charconv>
#include <cmath>
#include <sstream>

#include "replica-agent/engines/sim_model.hpp"

namespace fg::agent {

namespace {

constexpr std::size_t kMaxSlots = 256;

struct BadValue {
  std::string message;
};

std::uint64_t parse_uint(std::string_view flag, std::string_view text) {
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    throw BadValue{std::string(flag) + ": expected a non-negative integer, got '" +
                   std::string(text) + "'"};
  }
  return value;
}

double parse_double(std::string_view flag, std::string_view text) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() ||
      !std::isfinite(value)) {
    throw BadValue{std::string(flag) + ": expected a number, got '" + std::string(text) + "'"};
  }
  return value;
}

double parse_in_range(std::string_view flag, std::string_view text, double low, double high) {
  double value = parse_double(flag, text);
  if (value < low || value > high) {
    std::ostringstream out;
    out << flag << ": must be between " << low << " and " << high << ", got '" << text << "'";
    throw BadValue{out.str()};
  }
  return value;
}

std::string profile_list() {
  std::string list;
  for (const auto& name : sim::profile_names()) {
    list += list.empty() ? "" : ", ";
    list += name;
  }
  return list;
}

CliExit usage_error(const std::string& message) {
  return CliExit{2, "fleetgate-agent: " + message + "\n(see fleetgate-agent --help)\n"};
}

}  // namespace

void print_usage(std::ostream& out) {
  out << "usage: fleetgate-agent --model NAME [options]\n"
         "Serves one simulated phone: an OpenAI-compatible API with a phone's timing.\n"
         "\n"
         "  --listen HOST:PORT  address to serve on (default 127.0.0.1:8081; port 0 = any free "
         "port)\n"
         "  --model NAME        the model id this phone serves (required)\n"
         "  --profile NAME      simulator profile (default fast-test); one of:\n"
         "                      "
      << profile_list()
      << "\n"
         "  --slots N           parallel requests (default: the profile's)\n"
         "  --time-scale X      run X times faster than the profile (default 1)\n"
         "  --seed N            seed of the answer text and of jitter/failure draws (default 0)\n"
         "  --jitter F          spread request speeds by up to +-F, 0..0.95 (default 0)\n"
         "  --fail-rate F       fraction of requests answered 500, 0..1 (default 0)\n"
         "  --drain-timeout S   seconds in-flight requests get after SIGTERM (default 30)\n"
         "  --log-level LEVEL   debug, info, warn or error (default info)\n"
         "  --help, --version\n";
}

std::variant<AgentOptions, CliExit> parse_args(const std::vector<std::string>& args) {
  AgentOptions options;
  try {
    for (std::size_t i = 0; i < args.size(); ++i) {
      std::string flag = args[i];
      std::optional<std::string> inline_value;
      if (auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
        inline_value = flag.substr(eq + 1);
        flag.resize(eq);
      }
      if (flag == "--help" || flag == "-h") {
        std::ostringstream out;
        print_usage(out);
        return CliExit{0, out.str()};
      }
      if (flag == "--version") {
        return CliExit{0, "fleetgate-agent " FLEETGATE_VERSION "\n"};
      }
      auto value = [&]() -> std::string {
        if (inline_value) {
          return *inline_value;
        }
        if (i + 1 >= args.size()) {
          throw BadValue{flag + ": needs a value"};
        }
        return args[++i];
      };
      if (flag == "--listen") {
        std::string text = value();
        std::string why;
        auto parsed = net::parse_host_port(text, &why);
        if (!parsed) {
          throw BadValue{"--listen: '" + text + "' is not HOST:PORT (" + why + ")"};
        }
        options.listen = *parsed;
      } else if (flag == "--model") {
        options.model = value();
        if (options.model.empty()) {
          throw BadValue{"--model: must not be empty"};
        }
      } else if (flag == "--profile") {
        options.profile = value();
        if (sim::find_profile(options.profile) == nullptr) {
          throw BadValue{"--profile: unknown profile '" + options.profile +
                         "' (known: " + profile_list() + ")"};
        }
      } else if (flag == "--slots") {
        std::string text = value();
        auto slots = parse_uint(flag, text);
        if (slots < 1 || slots > kMaxSlots) {
          throw BadValue{"--slots: must be between 1 and " + std::to_string(kMaxSlots) + ", got '" +
                         text + "'"};
        }
        options.slots = static_cast<std::size_t>(slots);
      } else if (flag == "--time-scale") {
        std::string text = value();
        options.time_scale = parse_double(flag, text);
        if (!(options.time_scale > 0)) {
          throw BadValue{"--time-scale: must be greater than 0, got '" + text + "'"};
        }
      } else if (flag == "--seed") {
        options.seed = parse_uint(flag, value());
      } else if (flag == "--jitter") {
        options.jitter = parse_in_range(flag, value(), 0.0, 0.95);
      } else if (flag == "--fail-rate") {
        options.fail_rate = parse_in_range(flag, value(), 0.0, 1.0);
      } else if (flag == "--drain-timeout") {
        double seconds = parse_in_range(flag, value(), 0.0, 86400.0);
        options.drain_timeout = std::chrono::milliseconds(std::llround(seconds * 1000));
      } else if (flag == "--log-level") {
        std::string text = value();
        if (!log::parse_level(text, &options.log_level)) {
          throw BadValue{"--log-level: expected debug, info, warn or error, got '" + text + "'"};
        }
      } else {
        throw BadValue{"unknown argument '" + args[i] + "'"};
      }
    }
  } catch (const BadValue& bad) {
    return usage_error(bad.message);
  }
  if (options.model.empty()) {
    return usage_error("--model is required (the model id this phone serves)");
  }
  return options;
}

}  // namespace fg::agent
