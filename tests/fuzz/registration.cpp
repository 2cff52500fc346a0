// Fuzz target: the registration JSON body of POST /admin/v1/replicas/register, the one admin
// route that reads a body (orchestrator/fleet/registrations: parse_registration), followed by the
// rules the admin route applies to a parsed request (RegistrationBook::plan) against a fixed
// configuration. Asserted: parsing is total (a request or an error, never an exception); a
// refusal's message is short (it never echoes the body); an accepted request has a normalised URL
// with no userinfo, bounded version and device facts; a plan that accepts names a configured
// model and a URL that matches registration.allowed_urls.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "common/net/url.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/registrations.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

const fg::config::Config& config() {
  static const fg::config::Config c = fg::config::load_config_string(
      "registration:\n"
      "  token_env: FUZZ_REGISTRATION_TOKEN\n"
      "  allowed_urls: [\"https://*.acu.run\", \"http://127.0.0.1:*\", \"http://[::1]:7?01\"]\n"
      "models:\n"
      "  - name: m\n"
      "    endpoints: [\"https://static.acu.run\", {url: \"http://127.0.0.1:7001\", slots: 2}]\n"
      "  - name: n\n",
      "fuzz.yaml");
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const fg::fleet::ParsedRegistration parsed = fg::fleet::parse_registration(body);
  if (!parsed.request) {
    FUZZ_CHECK(parsed.error != fg::fleet::RequestError::none, "a refusal has a reason");
    FUZZ_CHECK(!parsed.message.empty() && parsed.message.size() < 256,
               "a refusal says why, briefly");
    return 0;
  }
  const auto& request = *parsed.request;
  const std::string url = request.url.to_string();
  FUZZ_CHECK(url.find('@') == std::string::npos || url.find('@') > url.find('/', 8),
             "an accepted URL has no userinfo");
  const auto again = fg::net::parse_url(url);
  FUZZ_CHECK(again && again->to_string() == url, "an accepted URL is normalised");
  FUZZ_CHECK(request.agent_version.size() <= 64, "the agent version is bounded");
  FUZZ_CHECK(
      request.device.is_object() && request.device.dump().size() <= fg::fleet::kMaxDeviceBytes,
      "the device facts are bounded");

  const fg::fleet::RegistrationBook book([] { return std::string("secret"); });
  const auto plan =
      book.plan(request, "", std::nullopt, config(), std::chrono::steady_clock::time_point{});
  if (plan.action != fg::fleet::RegistrationPlan::Action::refuse) {
    FUZZ_CHECK(request.model == "m" || request.model == "n", "only configured models register");
    bool allowed = false;
    for (const auto& pattern : config().registration.allowed_urls) {
      allowed = allowed || fg::config::glob_match(pattern, url);
    }
    FUZZ_CHECK(allowed, "only allowed URLs register");
    FUZZ_CHECK(plan.slots >= 1 && plan.slots <= fg::config::kMaxSlots, "slots in range");
  } else {
    FUZZ_CHECK(plan.refusal != fg::fleet::Refusal::none && !plan.message.empty(),
               "a refused plan says why");
  }
  return 0;
}
