// Fuzz target: the SSE relay and usage stripper (common/openai/sse). The front of the input sets
// the relay (strip_usage, the event size limit) and where the stream is cut into chunks; the rest
// is the replica's stream. Asserted, as sse.hpp promises:
// - the same bytes give the same output, the same events, the same overflow and the same leftover
//   however they are split (fed whole, or chunk by chunk);
// - the relay holds at most max_event_bytes, and examines each byte fed exactly once;
// - without strip_usage every byte is forwarded unchanged (output + leftover == input), and with
//   it an overflowing stream forwards only whole events from before the overflow;
// - the SSE parser on its own dispatches the same events however its input is split, and the
//   relay sees exactly those events when it did not overflow.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/openai/sse.hpp"
#include "tests/fuzz/fuzz_input.hpp"

namespace {

using fg::openai::SseEvent;

struct Run {
  std::string out;
  std::string events;  // every event dispatched, framed so that two lists compare exactly
  bool overflowed = false;
  std::string rest;
  std::uint64_t fed = 0;
};

void record(std::string& into, const SseEvent& e) {
  for (const std::string* field : {&e.event, &e.data, &e.id}) {
    into += std::to_string(field->size());
    into += ':';
    into += *field;
  }
  into += ';';
}

Run relay(const std::vector<std::string_view>& chunks, std::size_t max_event_bytes, bool strip) {
  Run run;
  fg::openai::SseRelay relay(max_event_bytes, strip,
                             [&](const SseEvent& e) { record(run.events, e); });
  for (const auto chunk : chunks) {
    const bool more = relay.feed(chunk, run.out);
    if (!more) {
      FUZZ_CHECK(relay.overflowed(), "the relay stops only on an overflow");
      FUZZ_CHECK(!relay.feed("data: x\n\n", run.out), "nothing is relayed after an overflow");
      run.overflowed = true;
      break;
    }
    run.fed += chunk.size();
    FUZZ_CHECK(relay.held() <= max_event_bytes, "the relay holds at most one event's limit");
    FUZZ_CHECK(relay.bytes_scanned() == run.fed, "each byte is examined once");
  }
  if (!run.overflowed) {
    run.rest = relay.finish();
  }
  return run;
}

std::string parse(const std::vector<std::string_view>& chunks) {
  std::string events;
  fg::openai::SseParser parser([&](const SseEvent& e) { record(events, e); });
  for (const auto chunk : chunks) {
    parser.feed(chunk);
  }
  return events;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fg::fuzz::Input input(data, size);
  const bool strip = (input.byte() & 1) != 0;
  const std::size_t max_event_bytes = input.u16() % 4096;
  std::vector<std::uint8_t> cuts(input.byte() % 32);
  for (auto& cut : cuts) {
    cut = input.byte();
  }
  const std::string_view stream = input.rest();

  const Run whole = relay({stream}, max_event_bytes, strip);
  const Run split = relay(fg::fuzz::split(stream, cuts), max_event_bytes, strip);
  FUZZ_CHECK(split.out == whole.out, "the output does not depend on the split");
  FUZZ_CHECK(split.events == whole.events, "the events do not depend on the split");
  FUZZ_CHECK(split.overflowed == whole.overflowed, "the overflow does not depend on the split");
  FUZZ_CHECK(split.rest == whole.rest, "the leftover does not depend on the split");
  if (!strip) {
    if (whole.overflowed) {
      FUZZ_CHECK(stream.substr(0, whole.out.size()) == whole.out,
                 "an overflowing stream forwards a prefix");
    } else {
      FUZZ_CHECK(whole.out + whole.rest == stream, "every byte is forwarded unchanged");
    }
  }

  const std::vector<std::string_view> bytewise = [&] {
    std::vector<std::string_view> one;
    for (std::size_t i = 0; i < stream.size() && i < 512; ++i) {
      one.push_back(stream.substr(i, 1));
    }
    if (stream.size() > 512) {
      one.push_back(stream.substr(512));
    }
    return one;
  }();
  const std::string events = parse({stream});
  if (!whole.overflowed) {
    FUZZ_CHECK(whole.events == events, "the relay sees the events the parser finds");
  }
  FUZZ_CHECK(parse(fg::fuzz::split(stream, cuts)) == events,
             "the parser's events do not depend on the split");
  FUZZ_CHECK(parse(bytewise) == events, "byte by byte gives the same events");
  return 0;
}
