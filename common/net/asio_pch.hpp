#pragma once
// Precompiled for every target that links fg_net: the Asio, Beast and SSL headers are parsed once.
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
