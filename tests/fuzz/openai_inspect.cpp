// Fuzz target: OpenAI request inspection (common/openai/inspect). The first line of the input is
// the Content-Type, the rest the body. inspect_request must answer every input with a request or
// an error (never throw); an accepted body names a model, and with_stream_usage (what the gateway
// does to an accepted streaming body) keeps what inspection read and sets include_usage.

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "common/openai/inspect.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fg::fuzz::Input input(data, size);
  const std::string_view content_type = input.line();
  const std::string_view body = input.rest();
  const auto result = fg::openai::inspect_request(content_type, body);
  if (const auto* error = std::get_if<fg::openai::InspectError>(&result)) {
    FUZZ_CHECK(error->status == 400 || error->status == 415, "refusals are 400 or 415");
    FUZZ_CHECK(!error->code.empty() && !error->message.empty(), "a refusal says why");
    // Messages never echo the body: at most a byte offset and fixed text.
    FUZZ_CHECK(error->message.size() < 200, "a refusal's message is short");
    return 0;
  }
  const auto& info = std::get<fg::openai::RequestInfo>(result);
  FUZZ_CHECK(!info.model.empty(), "an accepted request names a model");

  const auto rewritten = fg::openai::with_stream_usage(body);
  FUZZ_CHECK(rewritten.has_value(), "an accepted body is a JSON object");
  const auto again = fg::openai::inspect_request("application/json", *rewritten);
  const auto* info2 = std::get_if<fg::openai::RequestInfo>(&again);
  FUZZ_CHECK(info2 != nullptr, "the rewritten body is accepted too");
  FUZZ_CHECK(info2->model == info.model, "the rewrite keeps the model");
  FUZZ_CHECK(info2->stream == info.stream, "the rewrite keeps stream");
  FUZZ_CHECK(info2->include_usage, "the rewrite asks for usage");
  return 0;
}
