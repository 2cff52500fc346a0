// The Acurast bridge's JSON-RPC (tunnel/bridge_rpc.hpp), the deployment end time
// (registration/ends_at.hpp) and the tunnel key the agent makes (tunnel/tunnel_key.hpp).
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include "replica-agent/registration/ends_at.hpp"
#include "replica-agent/tunnel/bridge_rpc.hpp"
#include "replica-agent/tunnel/tunnel_key.hpp"

namespace fg::agent {
namespace {

using nlohmann::json;

TEST(AgentBridge, RequestLines) {
  EXPECT_EQ(bridge::request_line(1, "deployment_id", nullptr),
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"deployment_id\"}\n");
  bridge::TunnelParams p{{"relay-1.mainnet.acurast.com:4433"}, "acu.run", "127.0.0.1:8081", "S0VZ"};
  const std::string line = bridge::request_line(7, "tunnel_start", bridge::tunnel_start_params(p));
  ASSERT_EQ(line.back(), '\n');
  auto doc = json::parse(line);
  EXPECT_EQ(doc["id"], 7);
  EXPECT_EQ(doc["params"]["serverAddrs"], json::array({"relay-1.mainnet.acurast.com:4433"}));
  EXPECT_EQ(doc["params"]["domainSuffix"], "acu.run");
  EXPECT_EQ(doc["params"]["localAddr"], "127.0.0.1:8081");
  EXPECT_EQ(doc["params"]["primaryKey"], json({{"algorithm", "Secp256r1"}, {"bytes", "S0VZ"}}));
  EXPECT_EQ(doc["params"]["acmeStaging"], false);
}

TEST(AgentBridge, Answers) {
  auto a =
      bridge::parse_answer(R"({"jsonrpc":"2.0","id":3,"result":{"url":"https://ab.acu.run"}})", 3);
  ASSERT_TRUE(a.result);
  EXPECT_EQ(bridge::tunnel_url(*a.result), "https://ab.acu.run");
  a = bridge::parse_answer(
      R"({"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"relay unreachable"}})", 3);
  EXPECT_FALSE(a.result);
  EXPECT_EQ(a.error, "bridge error -32000: relay unreachable");
  EXPECT_EQ(bridge::parse_answer(R"({"jsonrpc":"2.0","id":4,"result":1})", 3).error,
            "bridge answer to another request");
  EXPECT_FALSE(bridge::parse_answer("not json", 3).result);
  EXPECT_FALSE(bridge::parse_answer(R"({"jsonrpc":"2.0","id":3})", 3).result);
  // A null result is a result (tunnel_stop).
  EXPECT_TRUE(bridge::parse_answer(R"({"jsonrpc":"2.0","id":3,"result":null})", 3).result);
}

TEST(AgentBridge, TunnelStateAndUrl) {
  EXPECT_EQ(bridge::tunnel_state(json{{"state", 2}}), 2);
  EXPECT_EQ(bridge::tunnel_state(json(0)), 0);
  EXPECT_FALSE(bridge::tunnel_state(json{{"state", 4}}));
  EXPECT_FALSE(bridge::tunnel_state(json{{"state", "up"}}));
  EXPECT_FALSE(bridge::tunnel_state(json::object()));
  EXPECT_TRUE(bridge::tunnel_down(0));
  EXPECT_FALSE(bridge::tunnel_down(1));
  EXPECT_FALSE(bridge::tunnel_down(2));
  EXPECT_TRUE(bridge::tunnel_down(3));
  EXPECT_FALSE(bridge::tunnel_url(json{{"url", ""}}));
  EXPECT_FALSE(bridge::tunnel_url(json("https://x")));
}

TEST(AgentBridge, DeploymentId) {
  EXPECT_EQ(bridge::deployment_id(json("dep-1")), "dep-1");
  EXPECT_EQ(bridge::deployment_id(json(12345)), "12345");
  EXPECT_EQ(bridge::deployment_id(json{{"deploymentId", "d"}}), "d");
  EXPECT_FALSE(bridge::deployment_id(json("")));
  EXPECT_FALSE(bridge::deployment_id(json(nullptr)));
}

TEST(AgentEndsAt, ParsesRfc3339) {
  EXPECT_EQ(parse_rfc3339("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(parse_rfc3339("2026-12-04T18:00:00Z"), 1796407200);
  EXPECT_EQ(parse_rfc3339("2026-12-04T20:00:00.250+02:00"), 1796407200);
  EXPECT_EQ(parse_rfc3339("2026-12-04t13:30:00-04:30"), 1796407200);
  EXPECT_EQ(parse_rfc3339("2024-02-29T00:00:00Z"), 1709164800);
  for (const char* bad : {"", "2026-12-04", "2026-12-04 18:00:00Z", "2026-13-01T00:00:00Z",
                          "2025-02-29T00:00:00Z", "2026-12-04T24:00:00Z", "2026-12-04T18:00:00",
                          "2026-12-04T18:00:00+0200", "2026-12-04T18:00:00.Z", "tomorrow"}) {
    EXPECT_FALSE(parse_rfc3339(bad)) << bad;
  }
}

TEST(AgentEndsAt, FormatsUtc) {
  EXPECT_EQ(format_rfc3339_utc(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(format_rfc3339_utc(1796407200), "2026-12-04T18:00:00Z");
  EXPECT_EQ(format_rfc3339_utc(1709164800 + 86399), "2024-02-29T23:59:59Z");
  for (std::int64_t t : {0LL, 951782400LL, 4102444799LL, 1796407200LL}) {
    EXPECT_EQ(parse_rfc3339(format_rfc3339_utc(t)), t);
  }
}

// A key made by the agent (no tunnel.key_env value) is what tunnel_start takes: base64 of a
// P-256 key's PKCS#8 DER, a new one each time.
TEST(AgentTunnelKey, MadeKeyIsBase64Pkcs8P256) {
  const std::string a = make_tunnel_key();
  const std::string b = make_tunnel_key();
  EXPECT_NE(a, b);
  for (const std::string& text : {a, b}) {
    ASSERT_EQ(text.size() % 4, 0U);
    std::vector<unsigned char> der(text.size());
    int n = EVP_DecodeBlock(der.data(), reinterpret_cast<const unsigned char*>(text.data()),
                            static_cast<int>(text.size()));
    ASSERT_GT(n, 0);
    n -= static_cast<int>(std::count(text.end() - 2, text.end(), '='));
    const unsigned char* p = der.data();
    PKCS8_PRIV_KEY_INFO* info = d2i_PKCS8_PRIV_KEY_INFO(nullptr, &p, n);
    ASSERT_NE(info, nullptr) << "not PKCS#8";
    EXPECT_EQ(p, der.data() + n) << "trailing bytes";
    EVP_PKEY* key = EVP_PKCS82PKEY(info);
    PKCS8_PRIV_KEY_INFO_free(info);
    ASSERT_NE(key, nullptr);
    char curve[64] = {};
    size_t len = 0;
    EXPECT_EQ(EVP_PKEY_get_utf8_string_param(key, "group", curve, sizeof curve, &len), 1);
    EXPECT_STREQ(curve, "prime256v1");
    EVP_PKEY_free(key);
  }
}

}  // namespace
}  // namespace fg::agent
