#include "common/net/url.hpp"

#include <gtest/gtest.h>

namespace fg::net {
namespace {

Url must_parse(std::string_view text) {
  std::string error;
  auto url = parse_url(text, &error);
  EXPECT_TRUE(url.has_value()) << text << ": " << error;
  return url.value_or(Url{});
}

std::string parse_error(std::string_view text) {
  std::string error;
  auto url = parse_url(text, &error);
  EXPECT_FALSE(url.has_value()) << text << " parsed as " << (url ? url->to_string() : "");
  EXPECT_FALSE(error.empty()) << text;
  return error;
}

TEST(UrlParse, HttpsDefaultPort) {
  const Url url = must_parse("https://a1b2c3.acu.run");
  EXPECT_EQ(url.scheme, "https");
  EXPECT_EQ(url.host, "a1b2c3.acu.run");
  EXPECT_EQ(url.port, 443);
  EXPECT_EQ(url.path_prefix, "");
  EXPECT_TRUE(url.tls());
  EXPECT_EQ(url.host_header(), "a1b2c3.acu.run");
  EXPECT_EQ(url.to_string(), "https://a1b2c3.acu.run");
}

TEST(UrlParse, HttpDefaultPort) {
  const Url url = must_parse("http://example.com");
  EXPECT_EQ(url.port, 80);
  EXPECT_FALSE(url.tls());
  EXPECT_EQ(url.host_header(), "example.com");
}

TEST(UrlParse, ExplicitPortAndPrefix) {
  const Url url = must_parse("http://127.0.0.1:7001/prefix");
  EXPECT_EQ(url.scheme, "http");
  EXPECT_EQ(url.host, "127.0.0.1");
  EXPECT_EQ(url.port, 7001);
  EXPECT_EQ(url.path_prefix, "/prefix");
  EXPECT_EQ(url.host_header(), "127.0.0.1:7001");
  EXPECT_EQ(url.to_string(), "http://127.0.0.1:7001/prefix");
}

TEST(UrlParse, ExplicitDefaultPortIsOmittedFromHostHeader) {
  EXPECT_EQ(must_parse("https://h:443").host_header(), "h");
  EXPECT_EQ(must_parse("https://h:443/x").to_string(), "https://h/x");
  EXPECT_EQ(must_parse("http://h:80").to_string(), "http://h");
  // The other scheme's default is not this scheme's default.
  EXPECT_EQ(must_parse("http://h:443").host_header(), "h:443");
  EXPECT_EQ(must_parse("https://h:80").host_header(), "h:80");
}

TEST(UrlParse, PortBounds) {
  EXPECT_EQ(must_parse("http://h:1").port, 1);
  EXPECT_EQ(must_parse("http://h:65535").port, 65535);
  EXPECT_EQ(must_parse("http://h:08080").port, 8080);
  EXPECT_EQ(parse_error("http://h:0"), "port out of range");
  EXPECT_EQ(parse_error("http://h:65536"), "port out of range");
  EXPECT_EQ(parse_error("http://h:99999999999999999999"), "port out of range");
  EXPECT_EQ(parse_error("http://h:"), "missing port");
  EXPECT_EQ(parse_error("http://h:8a"), "invalid port");
  EXPECT_EQ(parse_error("http://h:-1"), "invalid port");
  EXPECT_EQ(parse_error("http://h:+80"), "invalid port");
}

TEST(UrlParse, UppercaseSchemeAndHostAreLowercased) {
  const Url url = must_parse("HTTPS://Example.COM:8443/Path");
  EXPECT_EQ(url.scheme, "https");
  EXPECT_TRUE(url.tls());
  EXPECT_EQ(url.host, "example.com");
  EXPECT_EQ(url.path_prefix, "/Path");  // paths are case-sensitive
  EXPECT_EQ(url.to_string(), "https://example.com:8443/Path");
  EXPECT_EQ(must_parse("Http://h").scheme, "http");
}

TEST(UrlParse, TrailingSlashesRemoved) {
  EXPECT_EQ(must_parse("http://h/").path_prefix, "");
  EXPECT_EQ(must_parse("http://h/prefix/").path_prefix, "/prefix");
  EXPECT_EQ(must_parse("http://h/a/b//").path_prefix, "/a/b");
  EXPECT_EQ(must_parse("http://h:81/a/").to_string(), "http://h:81/a");
}

TEST(UrlParse, Ipv6Literal) {
  const Url url = must_parse("http://[::1]:8080");
  EXPECT_EQ(url.host, "::1");
  EXPECT_EQ(url.port, 8080);
  EXPECT_EQ(url.host_header(), "[::1]:8080");
  EXPECT_EQ(url.to_string(), "http://[::1]:8080");

  const Url defaulted = must_parse("https://[2001:DB8::a]/v");
  EXPECT_EQ(defaulted.host, "2001:db8::a");
  EXPECT_EQ(defaulted.port, 443);
  EXPECT_EQ(defaulted.host_header(), "[2001:db8::a]");
  EXPECT_EQ(defaulted.to_string(), "https://[2001:db8::a]/v");
}

TEST(UrlParse, Ipv6Forms) {
  for (const char* ok : {"http://[::]", "http://[1:2:3:4:5:6:7:8]", "http://[1::]", "http://[::8]",
                         "http://[1:2:3:4:5:6::8]", "http://[::ffff:192.0.2.1]",
                         "http://[64:ff9b::1.2.3.4]", "http://[fe80::1:2]"}) {
    must_parse(ok);
  }
  for (const char* bad :
       {"http://[]", "http://[::1", "http://[1:2:3:4:5:6:7:8:9]", "http://[1:2:3:4:5:6:7]",
        "http://[1::2::3]", "http://[12345::]", "http://[g::1]", "http://[::1]x",
        "http://[::1]:", "http://[fe80::1%25eth0]", "http://[1:2:3:4:5:6:7::8]",
        "http://[::1.2.3.256]", "http://[::1.2.3]", "http://[1.2.3.4::]", "http://[example.com]"}) {
    parse_error(bad);
  }
}

TEST(UrlParse, UnbracketedIpv6Rejected) {
  EXPECT_EQ(parse_error("http://::1:8080"), "missing host");
  EXPECT_EQ(parse_error("http://fe80::1"), "IPv6 addresses must be in brackets");
}

TEST(UrlParse, SchemeErrors) {
  EXPECT_EQ(parse_error("ftp://h"), "scheme must be http or https");
  EXPECT_EQ(parse_error("ws://h"), "scheme must be http or https");
  EXPECT_EQ(parse_error("httpx://h"), "scheme must be http or https");
  EXPECT_EQ(parse_error("h:8080"), "scheme must be http or https");
  EXPECT_EQ(parse_error("example.com"), "scheme must be http or https");
  EXPECT_EQ(parse_error("://h"), "scheme must be http or https");
  EXPECT_EQ(parse_error("http:/h"), "scheme must be http or https");
}

TEST(UrlParse, MissingHost) {
  EXPECT_EQ(parse_error("http://"), "missing host");
  EXPECT_EQ(parse_error("http:///prefix"), "missing host");
  EXPECT_EQ(parse_error("http://:8080"), "missing host");
  EXPECT_EQ(parse_error(""), "scheme must be http or https");
}

TEST(UrlParse, RejectsUserinfo) {
  EXPECT_EQ(parse_error("http://user:pass@h"), "userinfo not allowed");
  EXPECT_EQ(parse_error("http://user@h:80/p"), "userinfo not allowed");
  EXPECT_EQ(parse_error("http://@h"), "userinfo not allowed");
}

TEST(UrlParse, RejectsQueryAndFragment) {
  EXPECT_EQ(parse_error("http://h/p?x=1"), "query or fragment not allowed");
  EXPECT_EQ(parse_error("http://h?x"), "query or fragment not allowed");
  EXPECT_EQ(parse_error("http://h/#frag"), "query or fragment not allowed");
  EXPECT_EQ(parse_error("http://h/?"), "query or fragment not allowed");
}

TEST(UrlParse, RejectsBadCharacters) {
  parse_error(" http://h");
  parse_error("http://h ");
  parse_error("http://h/a b");
  parse_error("http://h/a\r\nHost: evil");
  parse_error(std::string_view("http://h\0x", 10));
  parse_error("http://h\xc3\xa9.com");
  parse_error("http://h%41");
  parse_error("http://h!/");
  parse_error("http://a\\b");
}

TEST(UrlParse, ErrorPointerOptionalAndUntouchedOnSuccess) {
  EXPECT_FALSE(parse_url("ftp://h").has_value());
  std::string error = "unchanged";
  EXPECT_TRUE(parse_url("http://h", &error).has_value());
  EXPECT_EQ(error, "unchanged");
}

TEST(UrlParse, ToStringRoundTrips) {
  for (const char* text :
       {"https://a1b2c3.acu.run", "http://127.0.0.1:7001/prefix", "http://[::1]:8080",
        "https://[2001:db8::1]:444/a/b", "http://host-name_x.internal:1/p"}) {
    const Url url = must_parse(text);
    EXPECT_EQ(url.to_string(), text);
    const Url again = must_parse(url.to_string());
    EXPECT_EQ(again.host, url.host);
    EXPECT_EQ(again.port, url.port);
    EXPECT_EQ(again.path_prefix, url.path_prefix);
  }
}

TEST(UrlHostPort, ParsesIpv4AndNames) {
  std::string error;
  auto hp = parse_host_port("127.0.0.1:8080", &error);
  ASSERT_TRUE(hp.has_value()) << error;
  EXPECT_EQ(hp->host, "127.0.0.1");
  EXPECT_EQ(hp->port, 8080);
  EXPECT_EQ(hp->to_string(), "127.0.0.1:8080");

  hp = parse_host_port("localhost:65535");
  ASSERT_TRUE(hp.has_value());
  EXPECT_EQ(hp->host, "localhost");
  EXPECT_EQ(hp->port, 65535);
}

TEST(UrlHostPort, PortZeroAllowed) {
  auto hp = parse_host_port("0.0.0.0:0");
  ASSERT_TRUE(hp.has_value());
  EXPECT_EQ(hp->host, "0.0.0.0");
  EXPECT_EQ(hp->port, 0);
  EXPECT_EQ(hp->to_string(), "0.0.0.0:0");
}

TEST(UrlHostPort, Ipv6) {
  auto hp = parse_host_port("[::1]:9090");
  ASSERT_TRUE(hp.has_value());
  EXPECT_EQ(hp->host, "::1");
  EXPECT_EQ(hp->port, 9090);
  EXPECT_EQ(hp->to_string(), "[::1]:9090");
  hp = parse_host_port("[::]:0");
  ASSERT_TRUE(hp.has_value());
  EXPECT_EQ(hp->to_string(), "[::]:0");
}

TEST(UrlHostPort, Errors) {
  auto error_of = [](std::string_view text) {
    std::string error;
    auto hp = parse_host_port(text, &error);
    EXPECT_FALSE(hp.has_value()) << text;
    EXPECT_FALSE(error.empty()) << text;
    return error;
  };
  EXPECT_EQ(error_of("127.0.0.1"), "missing port");
  EXPECT_EQ(error_of("127.0.0.1:"), "missing port");
  EXPECT_EQ(error_of("[::1]"), "missing port");
  EXPECT_EQ(error_of(":8080"), "missing host");
  EXPECT_EQ(error_of(""), "missing host");
  EXPECT_EQ(error_of("h:65536"), "port out of range");
  EXPECT_EQ(error_of("h:http"), "invalid port");
  EXPECT_EQ(error_of("::1:80"), "missing host");
  EXPECT_EQ(error_of("fe80::1:80"), "IPv6 addresses must be in brackets");
  error_of("http://h:80");
  error_of("h:80/");
  error_of(" h:80");
  error_of("[::1:80");
}

}  // namespace
}  // namespace fg::net
