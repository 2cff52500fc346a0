// The single translation unit that compiles Asio, Asio SSL and Beast (separate compilation), so
// that every other file only parses their declarations.
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
