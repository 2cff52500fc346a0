#pragma once

// Per-replica registration secrets: made from the CSPRNG, compared without leaking content or
// length. The gateway keeps each secret itself (not only a digest) so that it can later check
// an HMAC of a challenge under it.

#include <cstddef>
#include <string>
#include <string_view>

namespace fg {

// A fresh secret: `bytes` bytes from OpenSSL's RAND_bytes, as lower-case hex (2 * bytes
// characters). Throws std::runtime_error if the generator fails (it never hands out a weak one).
std::string random_secret(std::size_t bytes = 32);

// Whether two secrets are equal, in time that depends on neither their content nor their
// lengths: both are hashed (SHA-256) and the digests compared with CRYPTO_memcmp. An empty
// expected secret never matches.
bool secrets_equal(std::string_view presented, std::string_view expected);

}  // namespace fg
