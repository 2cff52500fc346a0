// Fuzz target: OpenAI request inspection (common/openai/inspect). The first line of the input is
// the Content-Type, the rest the body. inspect_request must answer every input with a request or
// an error (never throw); an accepted body names a model, and with_stream_usage (what the gateway
// does to an accepted streaming body) keeps what inspection read and sets include_usage.
//
// Differential: the one-pass scan (inspect_request) must give exactly the DOM's answer
// (inspect_request_dom) for every input, for the openai and the responses families, and its
// byte splice of include_usage must parse to the same document as the DOM's rewrite.

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "common/openai/inspect.hpp"
#include "common/util/json.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

void check_same(const std::variant<fg::openai::RequestInfo, fg::openai::InspectError>& fast,
                const std::variant<fg::openai::RequestInfo, fg::openai::InspectError>& dom) {
  FUZZ_CHECK(fast.index() == dom.index(), "the scan and the DOM agree on accepting");
  if (const auto* a = std::get_if<fg::openai::RequestInfo>(&fast)) {
    const auto& b = std::get<fg::openai::RequestInfo>(dom);
    FUZZ_CHECK(a->model == b.model, "the scan reads the DOM's model");
    FUZZ_CHECK(a->stream == b.stream, "the scan reads the DOM's stream");
    FUZZ_CHECK(a->include_usage == b.include_usage, "the scan reads the DOM's include_usage");
    FUZZ_CHECK(a->max_tokens == b.max_tokens, "the scan reads the DOM's token limit");
    return;
  }
  const auto& a = std::get<fg::openai::InspectError>(fast);
  const auto& b = std::get<fg::openai::InspectError>(dom);
  FUZZ_CHECK(
      a.status == b.status && a.code == b.code && a.param == b.param && a.message == b.message,
      "a refusal is the DOM's");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fg::fuzz::Input input(data, size);
  const std::string_view content_type = input.line();
  const std::string_view body = input.rest();
  const auto result = fg::openai::inspect_request(content_type, body);
  check_same(result, fg::openai::inspect_request_dom(fg::openai::Api::openai, content_type, body));
  check_same(fg::openai::inspect_request(fg::openai::Api::responses, content_type, body),
             fg::openai::inspect_request_dom(fg::openai::Api::responses, content_type, body));
  if (const auto* error = std::get_if<fg::openai::InspectError>(&result)) {
    FUZZ_CHECK(error->status == 400 || error->status == 415, "refusals are 400 or 415");
    FUZZ_CHECK(!error->code.empty() && !error->message.empty(), "a refusal says why");
    // Messages never echo the body: at most a byte offset and fixed text.
    FUZZ_CHECK(error->message.size() < 200, "a refusal's message is short");
    return 0;
  }
  const auto& info = std::get<fg::openai::RequestInfo>(result);
  FUZZ_CHECK(!info.model.empty(), "an accepted request names a model");

  // The prompt's blocks from the scan equal those of the parsed body.
  fg::openai::PromptBlocks scanned;
  const auto with_blocks =
      fg::openai::inspect_request(fg::openai::Api::openai, content_type, body, &scanned, 7);
  check_same(with_blocks, result);
  const auto doc = fg::parse_network_json(body);
  FUZZ_CHECK(!doc.is_discarded(), "an accepted body parses");
  const auto dom_blocks = fg::openai::prompt_blocks(doc, 7);
  FUZZ_CHECK(scanned.bytes == dom_blocks.bytes && scanned.hashes == dom_blocks.hashes,
             "the scan's prompt blocks are the DOM's");

  const auto rewritten = fg::openai::with_stream_usage(body);
  FUZZ_CHECK(rewritten.has_value(), "an accepted body is a JSON object");
  const auto again = fg::openai::inspect_request("application/json", *rewritten);
  const auto* info2 = std::get_if<fg::openai::RequestInfo>(&again);
  FUZZ_CHECK(info2 != nullptr, "the rewritten body is accepted too");
  FUZZ_CHECK(info2->model == info.model, "the rewrite keeps the model");
  FUZZ_CHECK(info2->stream == info.stream, "the rewrite keeps stream");
  FUZZ_CHECK(info2->include_usage, "the rewrite asks for usage");

  const auto spliced = fg::openai::with_stream_usage(body, info);
  FUZZ_CHECK(spliced.has_value(), "an accepted body can be spliced");
  const auto spliced_info = fg::openai::inspect_request("application/json", *spliced);
  const auto* info3 = std::get_if<fg::openai::RequestInfo>(&spliced_info);
  FUZZ_CHECK(info3 != nullptr, "the spliced body is accepted too");
  FUZZ_CHECK(info3->model == info.model && info3->stream == info.stream && info3->include_usage,
             "the splice keeps model and stream and asks for usage");
  // The splice adds one level at most: both documents parse within the nesting limit + 1.
  const auto a = fg::parse_network_json(*spliced, nullptr, fg::kMaxJsonDepth + 1);
  const auto b = fg::parse_network_json(*rewritten, nullptr, fg::kMaxJsonDepth + 1);
  FUZZ_CHECK(!a.is_discarded() && !b.is_discarded() && a == b,
             "the splice and the DOM rewrite are the same document");
  return 0;
}
