#include "replica-agent/tunnel/tunnel_key.hpp"

#include <memory>
#include <stdexcept>
#include <vector>

#include <openssl/evp.h>
#include <openssl/x509.h>

namespace fg::agent {

std::string make_tunnel_key() {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), &EVP_PKEY_free);
  if (!key) {
    throw std::runtime_error("cannot make a P-256 tunnel key");
  }
  std::unique_ptr<PKCS8_PRIV_KEY_INFO, decltype(&PKCS8_PRIV_KEY_INFO_free)> info(
      EVP_PKEY2PKCS8(key.get()), &PKCS8_PRIV_KEY_INFO_free);
  const int size = info ? i2d_PKCS8_PRIV_KEY_INFO(info.get(), nullptr) : -1;
  if (size <= 0) {
    throw std::runtime_error("cannot encode the tunnel key as PKCS#8");
  }
  std::vector<unsigned char> der(static_cast<std::size_t>(size));
  unsigned char* out = der.data();
  i2d_PKCS8_PRIV_KEY_INFO(info.get(), &out);
  std::string text(4 * ((der.size() + 2) / 3) + 1, '\0');
  const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(text.data()), der.data(),
                                      static_cast<int>(der.size()));
  text.resize(static_cast<std::size_t>(written));
  OPENSSL_cleanse(der.data(), der.size());
  return text;
}

}  // namespace fg::agent
