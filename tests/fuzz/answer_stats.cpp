// Fuzz target: reading usage and timings from a replica's answer (common/openai/answer.cpp).
// The first byte picks the API and whether the stats start filled; the rest is the answer body.
// Asserted: the small reader (read_stats_from_body, which reads the usage and timings objects
// without a DOM and leaves what it declines to nlohmann) reads every field exactly as the
// nlohmann-only reference (detail::read_stats_from_body_dom) does, including the fields it
// leaves untouched (stream events go through the same readers).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "common/openai/answer.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

using fg::openai::AnswerStats;

bool same_ms(const std::optional<double>& x, const std::optional<double>& y) {
  return x.has_value() == y.has_value() &&
         (!x || (*x == *y && std::signbit(*x) == std::signbit(*y)));
}

bool same_stats(const AnswerStats& a, const AnswerStats& b) {
  return a.prompt_tokens == b.prompt_tokens && a.completion_tokens == b.completion_tokens &&
         a.cached_tokens == b.cached_tokens && a.prompt_n == b.prompt_n &&
         same_ms(a.prompt_ms, b.prompt_ms) && a.predicted_n == b.predicted_n &&
         same_ms(a.predicted_ms, b.predicted_ms) && a.cache_n == b.cache_n &&
         a.truncated == b.truncated;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fg::fuzz::Input in(data, size);
  const std::uint8_t flags = in.byte();
  const auto api = static_cast<fg::openai::Api>(flags % 3);
  const std::string_view body = in.rest();
  AnswerStats small;
  if (flags & 4) {
    small = {1, 2, 3, 4, 5.5, 6, 7.5, 8, true};  // every field set
  }
  AnswerStats dom = small;
  fg::openai::read_stats_from_body(api, body, small);
  fg::openai::detail::read_stats_from_body_dom(api, body, dom);
  FUZZ_CHECK(same_stats(small, dom), "the small reader and the DOM read different stats");
  return 0;
}
