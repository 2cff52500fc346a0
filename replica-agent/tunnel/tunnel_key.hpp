#pragma once

// The Acurast tunnel's key when the deployment gives none (tunnel.key_env unset): every phone of a
// deployment gets the same environment, so a deployment of more than one phone cannot share a key
// (the URL follows from it) and each phone makes its own at start. Pure: OpenSSL only.

#include <string>

namespace fg::agent {

// A fresh P-256 key in the form tunnel.key_env holds and tunnel_start takes: base64 of its
// PKCS#8 DER. Throws std::runtime_error when OpenSSL cannot make one.
std::string make_tunnel_key();

}  // namespace fg::agent
