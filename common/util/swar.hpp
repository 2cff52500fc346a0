#pragma once
// Eight bytes at a time in one 64-bit word ("SIMD within a register"), for the JSON scans that
// look for the few bytes that end a run of string text (a quote, a backslash, a control or a
// non-ASCII byte). Byte by byte such a loop costs ~5 instructions a byte; a word at a time ~1.5,
// and a phone's prompt or answer is thousands of bytes of string text. Portable C++: no
// intrinsics, the same code on x86-64 and aarch64.
//
// equal(), below() and high() set bit 7 of the bytes of `word` that match (their "marks"). The
// mark of the first matching byte (in memory order) is exact; bytes after it may be marked
// wrongly (a borrow carries into them), so callers use only first_marked() and then look at the
// bytes themselves.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string_view>

namespace fg::swar {

static_assert(std::endian::native == std::endian::little,
              "first_marked() reads the first byte in memory as the lowest (little-endian)");

inline constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
inline constexpr std::uint64_t kHighs = 0x8080808080808080ULL;

// The eight bytes at p (no alignment needed).
inline std::uint64_t load(const char* p) {
  std::uint64_t word;
  std::memcpy(&word, p, sizeof word);
  return word;
}

// The bytes equal to c.
inline std::uint64_t equal(std::uint64_t word, unsigned char c) {
  const std::uint64_t x = word ^ (kOnes * c);
  return (x - kOnes) & ~x & kHighs;
}

// The bytes below limit (limit at most 0x80).
inline std::uint64_t below(std::uint64_t word, unsigned char limit) {
  return (word - kOnes * limit) & ~word & kHighs;
}

// The bytes at or above 0x80 (exact for every byte).
inline std::uint64_t high(std::uint64_t word) {
  return word & kHighs;
}

// The offset (0-7) of the first marked byte; marks must not be 0.
inline std::size_t first_marked(std::uint64_t marks) {
  return static_cast<std::size_t>(std::countr_zero(marks)) / 8;
}

// The offset of the first byte a or b in text at or after from, or npos. Inline and eight bytes
// at a time: memchr's call costs more than the few bytes between a JSON text's quotes, and
// find_first_of of two bytes calls memchr on the pair for every byte it scans.
inline std::size_t find(std::string_view text, std::size_t from, unsigned char a, unsigned char b) {
  const char* s = text.data();
  const std::size_t n = text.size();
  std::size_t i = from;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t word = load(s + i);
    if (const std::uint64_t marks = equal(word, a) | equal(word, b); marks != 0) {
      return i + first_marked(marks);
    }
  }
  for (; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == a || c == b) {
      return i;
    }
  }
  return std::string_view::npos;
}

// The offset of the first byte c in text at or after from, or npos.
inline std::size_t find(std::string_view text, std::size_t from, unsigned char c) {
  return find(text, from, c, c);
}

// Whether text holds any of needles, each of which holds the byte `rare` (a needle without it
// never matches): every `rare` of text (found eight bytes at a time) is compared with the
// needles around it. Cheap when `rare` is rare in text: the 'g' of "usage", "timings" and
// "length" in a streamed chunk's JSON (of its keys only "logprobs" and "system_fingerprint" have
// one) took 8k fewer instructions per 10-event stream than comparing at every quote.
inline bool contains_any(std::string_view text, std::initializer_list<std::string_view> needles,
                         unsigned char rare) {
  for (std::size_t at = find(text, 0, rare); at != std::string_view::npos;
       at = find(text, at + 1, rare)) {
    for (std::string_view needle : needles) {
      const std::size_t k = needle.find(static_cast<char>(rare));  // every needle has one
      if (at >= k && text.substr(at - k).starts_with(needle)) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace fg::swar
