#include "common/util/secret.hpp"

#include <array>
#include <stdexcept>
#include <vector>

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

namespace fg {

namespace {

std::array<unsigned char, SHA256_DIGEST_LENGTH> digest(std::string_view text) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> out{};
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), out.data());
  return out;
}

}  // namespace

std::string random_secret(std::size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  if (RAND_bytes(raw.data(), static_cast<int>(raw.size())) != 1) {
    throw std::runtime_error("the random generator failed (RAND_bytes)");
  }
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (unsigned char b : raw) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0x0f]);
  }
  return out;
}

bool secrets_equal(std::string_view presented, std::string_view expected) {
  const auto a = digest(presented);
  const auto b = digest(expected);
  const bool same = CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
  return same && !expected.empty();
}

}  // namespace fg
