#include "orchestrator/config/config.hpp"

#include <gtest/gtest.h>

#include <string>

namespace fg::config {
namespace {

using std::chrono::milliseconds;

// A valid models section, for tests about other sections. Occupies lines 1-2.
constexpr const char* kModels = "models:\n  - name: m\n";

Config load(const std::string& yaml) {
  return load_config_string(yaml, "t.yaml");
}

// The message of the ConfigError that loading yaml throws, or "" when it loads.
std::string error_of(const std::string& yaml) {
  try {
    load(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Checks the error message starts with "t.yaml:<line>: <path>: " and contains what.
::testing::AssertionResult fails_with(const std::string& yaml, int line, const std::string& path,
                                      const std::string& what = "") {
  const std::string error = error_of(yaml);
  if (error.empty()) {
    return ::testing::AssertionFailure() << "loaded without error:\n" << yaml;
  }
  const std::string prefix = "t.yaml:" + std::to_string(line) + ": " + path + ": ";
  if (error.rfind(prefix, 0) != 0) {
    return ::testing::AssertionFailure()
           << "expected prefix '" << prefix << "', got '" << error << "'";
  }
  if (error.find(what) == std::string::npos) {
    return ::testing::AssertionFailure() << "expected '" << what << "' in '" << error << "'";
  }
  return ::testing::AssertionSuccess();
}

// ---- Defaults and full parsing ----

TEST(ConfigDefaults, MinimalFileGetsStructDefaults) {
  const Config c = load(kModels);
  const Config d;
  EXPECT_EQ(c.server.listen.host, "127.0.0.1");
  EXPECT_EQ(c.server.listen.port, 8080);
  EXPECT_FALSE(c.server.tls.enabled());
  EXPECT_EQ(c.server.api_keys_env, "");
  EXPECT_EQ(c.server.max_body_bytes, 4u * 1024 * 1024);
  EXPECT_EQ(c.server.max_connections, 10000u);
  EXPECT_EQ(c.server.max_connections_per_ip, 1000u);
  EXPECT_EQ(c.server.header_timeout, milliseconds(10'000));
  EXPECT_EQ(c.server.body_timeout, milliseconds(60'000));
  EXPECT_EQ(c.server.idle_timeout, milliseconds(60'000));
  EXPECT_EQ(c.server.write_timeout, milliseconds(60'000));
  EXPECT_EQ(c.server.drain_timeout, milliseconds(30'000));
  EXPECT_EQ(c.admin.listen.host, "127.0.0.1");
  EXPECT_EQ(c.admin.listen.port, 9090);
  EXPECT_FALSE(c.admin.tls.enabled());
  EXPECT_EQ(c.routing.queue_max, d.routing.queue_max);
  EXPECT_EQ(c.routing.queue_timeout, milliseconds(600'000));
  EXPECT_EQ(c.routing.request_timeout, milliseconds(1'800'000));
  EXPECT_EQ(c.routing.retries, 2u);
  EXPECT_EQ(c.routing.keepalive_interval, milliseconds(15'000));
  EXPECT_EQ(c.upstream.api_key_env, "");
  EXPECT_EQ(c.upstream.ca_file, "");
  EXPECT_EQ(c.upstream.connect_timeout, milliseconds(10'000));
  EXPECT_EQ(c.upstream.first_byte_timeout, milliseconds(600'000));
  EXPECT_EQ(c.upstream.idle_timeout, milliseconds(120'000));
  EXPECT_EQ(c.upstream.max_idle_per_replica, 8u);
  EXPECT_EQ(c.upstream.max_event_bytes, 1024u * 1024);
  EXPECT_EQ(c.upstream.max_response_bytes, 64u * 1024 * 1024);
  EXPECT_EQ(c.upstream.dns_cache_ttl, milliseconds(30'000));
  EXPECT_EQ(c.log.level, "info");
  EXPECT_EQ(c.log.format, "auto");
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].name, "m");
  EXPECT_EQ(c.models[0].replicas, 0u);
  EXPECT_EQ(c.models[0].slots, 1u);
  EXPECT_TRUE(c.models[0].endpoints.empty());
}

TEST(ConfigDefaults, EmptySectionsKeepDefaults) {
  const Config c = load(std::string(kModels) + "server:\nadmin:\nrouting: {}\nupstream:\nlog:\n");
  EXPECT_EQ(c.server.listen.port, 8080);
  EXPECT_EQ(c.admin.listen.port, 9090);
  EXPECT_EQ(c.routing.queue_max, 10000u);
  EXPECT_EQ(c.log.level, "info");
}

TEST(ConfigParse, EveryKeyIsRead) {
  const Config c = load(R"(
server:
  listen: 0.0.0.0:8443
  tls: {cert: /etc/fg/cert.pem, key: /etc/fg/key.pem}
  api_keys_env: FLEETGATE_API_KEYS
  max_body_bytes: 1048576
  max_connections: 500
  max_connections_per_ip: 0
  header_timeout: 2s
  body_timeout: 5s
  idle_timeout: 7s
  write_timeout: 9s
  drain_timeout: 0s
admin:
  listen: "[::1]:9191"
  tls: {cert: /etc/fg/admin.pem, key: /etc/fg/admin.key}
models:
  - name: qwen3.5-9b-fraud
    replicas: 10
    slots: 3
    endpoints:
      - https://a1b2c3.acu.run
      - {url: "http://127.0.0.1:7001", slots: 2}
  - name: other
routing:
  queue_max: 5
  queue_timeout: 2m
  request_timeout: 3m
  retries: 0
  keepalive_interval: 0s
upstream:
  api_key_env: FLEETGATE_REPLICA_KEY
  ca_file: /etc/ssl/ca.pem
  connect_timeout: 250ms
  first_byte_timeout: 1h
  idle_timeout: 90s
  max_idle_per_replica: 0
  max_event_bytes: 4096
  max_response_bytes: 65536
  dns_cache_ttl: 0s
log:
  level: debug
)");
  EXPECT_EQ(c.server.listen.host, "0.0.0.0");
  EXPECT_EQ(c.server.listen.port, 8443);
  EXPECT_TRUE(c.server.tls.enabled());
  EXPECT_EQ(c.server.tls.cert, "/etc/fg/cert.pem");
  EXPECT_EQ(c.server.tls.key, "/etc/fg/key.pem");
  EXPECT_EQ(c.server.api_keys_env, "FLEETGATE_API_KEYS");
  EXPECT_EQ(c.server.max_body_bytes, 1048576u);
  EXPECT_EQ(c.server.max_connections, 500u);
  EXPECT_EQ(c.server.max_connections_per_ip, 0u);
  EXPECT_EQ(c.server.header_timeout, milliseconds(2'000));
  EXPECT_EQ(c.server.body_timeout, milliseconds(5'000));
  EXPECT_EQ(c.server.idle_timeout, milliseconds(7'000));
  EXPECT_EQ(c.server.write_timeout, milliseconds(9'000));
  EXPECT_EQ(c.server.drain_timeout, milliseconds(0));
  EXPECT_EQ(c.admin.listen.host, "::1");
  EXPECT_EQ(c.admin.listen.port, 9191);
  EXPECT_EQ(c.admin.tls.cert, "/etc/fg/admin.pem");
  EXPECT_EQ(c.admin.tls.key, "/etc/fg/admin.key");
  EXPECT_EQ(c.routing.request_timeout, milliseconds(180'000));
  EXPECT_EQ(c.upstream.max_event_bytes, 4096u);
  EXPECT_EQ(c.upstream.max_response_bytes, 65536u);
  EXPECT_EQ(c.upstream.dns_cache_ttl, milliseconds(0));
  ASSERT_EQ(c.models.size(), 2u);
  const ModelConfig& m = c.models[0];
  EXPECT_EQ(m.name, "qwen3.5-9b-fraud");
  EXPECT_EQ(m.replicas, 10u);
  EXPECT_EQ(m.slots, 3u);
  ASSERT_EQ(m.endpoints.size(), 2u);
  EXPECT_EQ(m.endpoints[0].url.to_string(), "https://a1b2c3.acu.run");
  EXPECT_TRUE(m.endpoints[0].url.tls());
  EXPECT_EQ(m.endpoints[0].slots, 3u);
  EXPECT_EQ(m.endpoints[1].url.host, "127.0.0.1");
  EXPECT_EQ(m.endpoints[1].url.port, 7001);
  EXPECT_EQ(m.endpoints[1].slots, 2u);
  EXPECT_EQ(c.models[1].name, "other");
  EXPECT_EQ(c.routing.queue_max, 5u);
  EXPECT_EQ(c.routing.queue_timeout, milliseconds(120'000));
  EXPECT_EQ(c.routing.retries, 0u);
  EXPECT_EQ(c.routing.keepalive_interval, milliseconds(0));
  EXPECT_EQ(c.upstream.api_key_env, "FLEETGATE_REPLICA_KEY");
  EXPECT_EQ(c.upstream.ca_file, "/etc/ssl/ca.pem");
  EXPECT_EQ(c.upstream.connect_timeout, milliseconds(250));
  EXPECT_EQ(c.upstream.first_byte_timeout, milliseconds(3'600'000));
  EXPECT_EQ(c.upstream.idle_timeout, milliseconds(90'000));
  EXPECT_EQ(c.upstream.max_idle_per_replica, 0u);
  EXPECT_EQ(c.log.level, "debug");
  EXPECT_EQ(c.find_model("other"), &c.models[1]);
  EXPECT_EQ(c.find_model("missing"), nullptr);
}

TEST(ConfigParse, DesiredReplicasFallsBackToEndpointCount) {
  const Config c = load(R"(models:
  - name: stated
    replicas: 7
    endpoints: [http://h1, http://h2]
  - name: unstated
    endpoints: [http://h3, http://h4]
)");
  EXPECT_EQ(c.models[0].desired_replicas(), 7u);
  EXPECT_EQ(c.models[1].replicas, 0u);
  EXPECT_EQ(c.models[1].desired_replicas(), 2u);
}

TEST(ConfigParse, LogLevelsAccepted) {
  for (const char* level : {"debug", "info", "warn", "error"}) {
    EXPECT_EQ(load(std::string(kModels) + "log: {level: " + level + "}").log.level, level);
  }
}

TEST(ConfigParse, LogFormatsAccepted) {
  for (const char* format : {"auto", "json", "text"}) {
    EXPECT_EQ(load(std::string(kModels) + "log: {format: " + format + "}").log.format, format);
  }
  EXPECT_EQ(error_of(std::string(kModels) + "log: {format: xml}"),
            "t.yaml:3: log.format: expected one of auto, json, text, got \"xml\"");
}

TEST(ConfigParse, EmptyEnvNamesMeanUnset) {
  const Config c =
      load(std::string(kModels) + "server: {api_keys_env: \"\"}\nupstream:\n  api_key_env:\n");
  EXPECT_EQ(c.server.api_keys_env, "");
  EXPECT_EQ(c.upstream.api_key_env, "");
}

TEST(ConfigParse, MaxBodyBytesAcceptsLargeValues) {
  EXPECT_EQ(load(std::string(kModels) +
                 "server: {max_body_bytes: 8589934592, max_buffered_bytes: 17179869184}")
                .server.max_body_bytes,
            8589934592u);
}

TEST(ConfigParse, MaxBufferedBytesDefaultsToOneGibAndMustHoldTwoLargestBodies) {
  EXPECT_EQ(load(kModels).server.max_buffered_bytes, 1024ull * 1024 * 1024);
  EXPECT_EQ(load(std::string(kModels) + "server: {max_buffered_bytes: 8388608}")
                .server.max_buffered_bytes,
            8388608u);
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  max_buffered_bytes: 8388607\n", 4,
                         "server.max_buffered_bytes", "at least twice server.max_body_bytes"));
  // Only the body limit set: the error names it.
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  max_body_bytes: 1073741824\n", 4,
                         "server.max_body_bytes", "at least twice server.max_body_bytes"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  max_buffered_bytes: 0\n", 4,
                         "server.max_buffered_bytes"));
}

// ---- Durations ----

TEST(ConfigDuration, AllUnitsParse) {
  const Config c = load(std::string(kModels) + R"(routing:
  queue_timeout: 1h
  keepalive_interval: 500ms
upstream:
  connect_timeout: 3s
  idle_timeout: 2m
)");
  EXPECT_EQ(c.routing.queue_timeout, milliseconds(3'600'000));
  EXPECT_EQ(c.routing.keepalive_interval, milliseconds(500));
  EXPECT_EQ(c.upstream.connect_timeout, milliseconds(3'000));
  EXPECT_EQ(c.upstream.idle_timeout, milliseconds(120'000));
}

TEST(ConfigDuration, BareNumberIsRejected) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "routing:\n  queue_timeout: 600\n", 4,
                         "routing.queue_timeout", "add a unit"));
}

TEST(ConfigDuration, WordIsRejected) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "routing:\n  queue_timeout: ten\n", 4,
                         "routing.queue_timeout", "expected a duration such as 600s, got \"ten\""));
}

TEST(ConfigDuration, NegativeIsRejected) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  drain_timeout: -5s\n", 4,
                         "server.drain_timeout", "expected a duration"));
}

TEST(ConfigDuration, MapIsRejected) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "upstream:\n  idle_timeout: {s: 5}\n", 4,
                         "upstream.idle_timeout", "got a map"));
}

TEST(ConfigDuration, ZeroRejectedWhereMeaningless) {
  const std::pair<const char*, const char*> cases[] = {
      {"server", "header_timeout"},    {"server", "body_timeout"},
      {"server", "idle_timeout"},      {"server", "write_timeout"},
      {"routing", "queue_timeout"},    {"routing", "request_timeout"},
      {"upstream", "connect_timeout"}, {"upstream", "first_byte_timeout"},
      {"upstream", "idle_timeout"},
  };
  for (const auto& [section, key] : cases) {
    EXPECT_TRUE(fails_with(std::string(kModels) + section + ":\n  " + key + ": 0s\n", 4,
                           std::string(section) + "." + key, "must be greater than 0"));
  }
}

TEST(ConfigServer, ReadTimeoutNamesItsReplacements) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  read_timeout: 30s\n", 4,
                         "server.read_timeout", "server.header_timeout"));
}

TEST(ConfigServer, ZeroSizesAndConnectionCapAreRefused) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  max_connections: 0\n", 4,
                         "server.max_connections", "must be greater than 0"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "upstream:\n  max_event_bytes: 0\n", 4,
                         "upstream.max_event_bytes", "must be greater than 0"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "upstream:\n  max_response_bytes: 0\n", 4,
                         "upstream.max_response_bytes", "must be greater than 0"));
}

TEST(ConfigAdmin, TlsNeedsCertAndKey) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "admin:\n  tls:\n    cert: /c.pem\n", 5,
                         "admin.tls.key", "missing; required when admin.tls.cert is set"));
}

TEST(ConfigDuration, ZeroAllowedForKeepaliveAndDrain) {
  const Config c = load(std::string(kModels) +
                        "routing: {keepalive_interval: 0ms}\nserver: {drain_timeout: 0s}\n");
  EXPECT_EQ(c.routing.keepalive_interval, milliseconds(0));
  EXPECT_EQ(c.server.drain_timeout, milliseconds(0));
}

// ---- Endpoints ----

TEST(ConfigEndpoint, ShorthandAndMapForms) {
  const Config c = load(R"(models:
  - name: m
    slots: 4
    endpoints:
      - http://127.0.0.1:7001
      - url: http://127.0.0.1:7002
      - url: http://127.0.0.1:7003
        slots: 9
      - {url: "https://x.acu.run/v", slots: 1024}
)");
  const auto& eps = c.models[0].endpoints;
  ASSERT_EQ(eps.size(), 4u);
  EXPECT_EQ(eps[0].url.port, 7001);
  EXPECT_EQ(eps[0].slots, 4u);  // the model's slots
  EXPECT_EQ(eps[1].url.port, 7002);
  EXPECT_EQ(eps[1].slots, 4u);  // map form without slots: still the model's
  EXPECT_EQ(eps[2].slots, 9u);  // its own
  EXPECT_EQ(eps[3].slots, 1024u);
  EXPECT_EQ(eps[3].url.path_prefix, "/v");
}

TEST(ConfigEndpoint, ModelSlotsDefaultToOne) {
  const Config c = load("models:\n  - name: m\n    endpoints: [http://a]\n");
  EXPECT_EQ(c.models[0].endpoints[0].slots, 1u);
}

TEST(ConfigEndpoint, EmptyEndpointListIsAllowed) {
  EXPECT_TRUE(load("models:\n  - name: m\n    endpoints: []\n").models[0].endpoints.empty());
  EXPECT_TRUE(load("models:\n  - name: m\n    endpoints:\n").models[0].endpoints.empty());
}

TEST(ConfigEndpoint, BadUrlPassesParserMessage) {
  EXPECT_TRUE(fails_with("models:\n  - name: m\n    endpoints:\n      - ftp://x\n", 4,
                         "models[0].endpoints[0]",
                         "invalid URL \"ftp://x\": scheme must be http or https"));
}

TEST(ConfigEndpoint, BadUrlInMapFormNamesUrlKey) {
  EXPECT_TRUE(fails_with(
      "models:\n  - name: m\n    endpoints:\n      - http://a\n      - url: http://a?x=1\n", 5,
      "models[0].endpoints[1].url", "query or fragment not allowed"));
}

TEST(ConfigEndpoint, MissingUrlInMapForm) {
  EXPECT_TRUE(fails_with("models:\n  - name: m\n    endpoints:\n      - slots: 2\n", 4,
                         "models[0].endpoints[0].url", "missing"));
}

TEST(ConfigEndpoint, ListIsNotAnEndpoint) {
  EXPECT_TRUE(fails_with("models:\n  - name: m\n    endpoints:\n      - [http://a]\n", 4,
                         "models[0].endpoints[0]", "got a list"));
}

TEST(ConfigEndpoint, EndpointsMustBeAList) {
  EXPECT_TRUE(fails_with("models:\n  - name: m\n    endpoints: http://a\n", 3,
                         "models[0].endpoints", "expected a list"));
}

TEST(ConfigEndpoint, UnknownKeyInEndpointMap) {
  EXPECT_TRUE(fails_with("models:\n  - name: m\n    endpoints:\n      - {url: http://a, slot: 2}\n",
                         4, "models[0].endpoints[0].slot", "did you mean 'slots'?"));
}

TEST(ConfigEndpoint, SlotsOutOfRange) {
  EXPECT_TRUE(
      fails_with("models:\n  - name: m\n    endpoints:\n      - {url: http://a, slots: 0}\n", 4,
                 "models[0].endpoints[0].slots", "between 1 and 1024"));
  EXPECT_TRUE(fails_with(
      "models:\n  - name: m\n    endpoints:\n      - url: http://a\n        slots: 1025\n", 5,
      "models[0].endpoints[0].slots", "got 1025"));
}

TEST(ConfigEndpoint, DuplicateWithinModelAfterNormalisation) {
  // An explicit default port and a trailing slash name the same replica.
  EXPECT_TRUE(fails_with(
      "models:\n  - name: m\n    endpoints:\n      - http://127.0.0.1:80/\n      - "
      "http://127.0.0.1\n",
      5, "models[0].endpoints[1]",
      "duplicate endpoint http://127.0.0.1; already listed at models[0].endpoints[0] (line 4)"));
}

TEST(ConfigEndpoint, DuplicateAcrossModels) {
  EXPECT_TRUE(fails_with(R"(models:
  - name: a
    endpoints: [https://x.acu.run]
  - name: b
    endpoints:
      - {url: "https://x.acu.run:443"}
)",
                         6, "models[1].endpoints[0].url", "already listed at models[0]"));
}

TEST(ConfigEndpoint, DifferentPathsAreDistinct) {
  const Config c = load("models:\n  - name: m\n    endpoints: [http://a/x, http://a/y]\n");
  EXPECT_EQ(c.models[0].endpoints.size(), 2u);
}

// ---- Models ----

TEST(ConfigModels, MissingModels) {
  EXPECT_TRUE(fails_with("server:\n  listen: 127.0.0.1:1\n", 1, "models", "missing"));
}

TEST(ConfigModels, EmptyModelList) {
  EXPECT_TRUE(fails_with("log: {level: info}\nmodels: []\n", 2, "models", "at least one model"));
}

TEST(ConfigModels, ModelsMustBeAList) {
  EXPECT_TRUE(fails_with("models:\n  name: m\n", 2, "models", "expected a list of models"));
}

TEST(ConfigModels, ModelMustBeAMap) {
  EXPECT_TRUE(fails_with("models:\n  - m\n", 2, "models[0]", "expected a map"));
}

TEST(ConfigModels, MissingNameUsesModelLine) {
  EXPECT_TRUE(fails_with("models:\n  - name: a\n  - replicas: 2\n    slots: 1\n", 3,
                         "models[1].name", "missing"));
}

TEST(ConfigModels, EmptyName) {
  EXPECT_TRUE(fails_with("models:\n  - name: \"\"\n", 2, "models[0].name", "must not be empty"));
  EXPECT_TRUE(fails_with("models:\n  - name:\n", 2, "models[0].name", "must not be empty"));
}

TEST(ConfigModels, DuplicateName) {
  EXPECT_TRUE(fails_with("models:\n  - name: a\n  - name: b\n  - name: a\n", 4, "models[2].name",
                         "duplicate model name \"a\"; already defined at models[0] (line 2)"));
}

TEST(ConfigModels, SlotsZero) {
  EXPECT_TRUE(fails_with("models:\n  - name: a\n    slots: 0\n", 3, "models[0].slots",
                         "between 1 and 1024"));
}

TEST(ConfigModels, SlotsTooLarge) {
  EXPECT_TRUE(fails_with("models:\n  - name: a\n    slots: 1025\n", 3, "models[0].slots",
                         "between 1 and 1024, got 1025"));
}

TEST(ConfigModels, NegativeReplicas) {
  EXPECT_TRUE(fails_with("models:\n  - name: a\n    replicas: -1\n", 3, "models[0].replicas",
                         "must not be negative"));
}

TEST(ConfigModels, ReplicasNotANumber) {
  EXPECT_TRUE(fails_with("models:\n  - name: a\n    replicas: ten\n", 3, "models[0].replicas",
                         "expected a whole number, got \"ten\""));
}

TEST(ConfigModels, UnknownModelKeySuggests) {
  EXPECT_TRUE(fails_with("models:\n  - name: a\n    endpoint: [http://a]\n", 3,
                         "models[0].endpoint", "unknown key; did you mean 'endpoints'?"));
}

// ---- Keys and types ----

TEST(ConfigKeys, UnknownTopLevelKeySuggests) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "routnig: {}\n", 3, "routnig",
                         "unknown key; did you mean 'routing'?"));
}

TEST(ConfigKeys, UnknownNestedKeySuggests) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "upstream:\n  conect_timeout: 5s\n", 4,
                         "upstream.conect_timeout", "did you mean 'connect_timeout'?"));
}

TEST(ConfigKeys, UnknownTlsKey) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  tls:\n    certs: a\n", 5,
                         "server.tls.certs", "did you mean 'cert'?"));
}

TEST(ConfigKeys, UnknownKeyWithoutSuggestion) {
  const std::string error = error_of(std::string(kModels) + "log:\n  verbosity: 3\n");
  EXPECT_EQ(error, "t.yaml:4: log.verbosity: unknown key");
}

TEST(ConfigKeys, DuplicateKey) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "log: {level: info}\nlog: {level: warn}\n", 4,
                         "log", "duplicate key"));
}

TEST(ConfigKeys, NonScalarKey) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "? [a, b]\n: 1\n", 3, "(root)", "plain names"));
}

TEST(ConfigKeys, SectionMustBeAMap) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "server: 5\n", 3, "server", "expected a map"));
  EXPECT_TRUE(
      fails_with(std::string(kModels) + "server:\n  tls: [a]\n", 4, "server.tls", "got a list"));
}

TEST(ConfigTypes, MapWhereScalarExpected) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  listen: {host: a}\n", 4,
                         "server.listen", "expected host:port such as 127.0.0.1:8080, got a map"));
}

TEST(ConfigTypes, ListWhereIntegerExpected) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "routing:\n  retries: [1]\n", 4, "routing.retries",
                         "expected a whole number, got a list"));
}

TEST(ConfigTypes, TextWhereIntegerExpected) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "routing:\n  queue_max: abc\n", 4,
                         "routing.queue_max", "expected a whole number, got \"abc\""));
  EXPECT_TRUE(fails_with(std::string(kModels) + "routing:\n  queue_max: 1.5\n", 4,
                         "routing.queue_max", "expected a whole number"));
}

TEST(ConfigTypes, NegativeUnsigned) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "upstream:\n  max_idle_per_replica: -2\n", 4,
                         "upstream.max_idle_per_replica", "must not be negative, got -2"));
}

TEST(ConfigTypes, IntegerOverflow) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "routing:\n  retries: 4294967296\n", 4,
                         "routing.retries", "must be at most 4294967295"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  max_body_bytes: 99999999999999999999\n",
                         4, "server.max_body_bytes", "must be at most"));
}

TEST(ConfigTypes, MissingIntegerValue) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "routing:\n  retries:\n", 4, "routing.retries",
                         "got nothing"));
}

// ---- Values ----

TEST(ConfigValues, QueueMaxZero) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "routing:\n  queue_max: 0\n", 4,
                         "routing.queue_max", "must be greater than 0"));
}

TEST(ConfigValues, MaxBodyBytesZero) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  max_body_bytes: 0\n", 4,
                         "server.max_body_bytes", "must be greater than 0"));
}

TEST(ConfigValues, BadListenAddress) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  listen: localhost\n", 4,
                         "server.listen", "missing port"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "admin:\n  listen: 127.0.0.1:70000\n", 4,
                         "admin.listen", "port out of range"));
}

TEST(ConfigValues, SameListenAddress) {
  EXPECT_TRUE(
      fails_with(std::string(kModels) +
                     "server:\n  listen: 127.0.0.1:8000\nadmin:\n  listen: 127.0.0.1:8000\n",
                 6, "admin.listen", "must differ from server.listen"));
}

TEST(ConfigValues, PublicListenOnDefaultAdminAddress) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  listen: 127.0.0.1:9090\n", 4,
                         "server.listen", "must differ from admin.listen"));
}

TEST(ConfigValues, WildcardOverlapsSpecificHost) {
  EXPECT_TRUE(fails_with(
      std::string(kModels) + "server: {listen: 0.0.0.0:8000}\nadmin: {listen: 127.0.0.1:8000}\n", 4,
      "admin.listen", "must differ"));
}

TEST(ConfigValues, SamePortOnDifferentHostsIsFine) {
  const Config c = load(std::string(kModels) +
                        "server: {listen: 127.0.0.1:8000}\nadmin: {listen: 127.0.0.2:8000}\n");
  EXPECT_EQ(c.admin.listen.port, 8000);
}

TEST(ConfigValues, PortZeroTwiceIsFine) {
  const Config c =
      load(std::string(kModels) + "server: {listen: 127.0.0.1:0}\nadmin: {listen: 127.0.0.1:0}\n");
  EXPECT_EQ(c.server.listen.port, 0);
  EXPECT_EQ(c.admin.listen.port, 0);
}

TEST(ConfigValues, TlsCertWithoutKey) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  tls:\n    cert: c.pem\n", 5,
                         "server.tls.key", "required when server.tls.cert is set"));
}

TEST(ConfigValues, TlsKeyWithoutCert) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  tls: {cert: \"\", key: k.pem}\n", 4,
                         "server.tls.cert", "required when server.tls.key is set"));
}

TEST(ConfigValues, TlsBothEmptyIsOff) {
  EXPECT_FALSE(load(std::string(kModels) + "server:\n  tls: {cert: \"\", key: \"\"}\n")
                   .server.tls.enabled());
}

TEST(ConfigValues, BadEnvNames) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  api_keys_env: 1KEYS\n", 4,
                         "server.api_keys_env", "environment variable name"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "server:\n  api_keys_env: MY-KEYS\n", 4,
                         "server.api_keys_env", "\"MY-KEYS\""));
  EXPECT_TRUE(fails_with(std::string(kModels) + "upstream:\n  api_key_env: \"$KEY\"\n", 4,
                         "upstream.api_key_env", "environment variable name"));
}

TEST(ConfigValues, GoodEnvNames) {
  const Config c =
      load(std::string(kModels) + "server: {api_keys_env: _k9}\nupstream: {api_key_env: Ab_1}\n");
  EXPECT_EQ(c.server.api_keys_env, "_k9");
  EXPECT_EQ(c.upstream.api_key_env, "Ab_1");
}

TEST(ConfigValues, BadLogLevel) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "log:\n  level: verbose\n", 4, "log.level",
                         "expected one of debug, info, warn, error, got \"verbose\""));
  EXPECT_TRUE(fails_with(std::string(kModels) + "log:\n  level: INFO\n", 4, "log.level",
                         "expected one of"));
}

// ---- Health checks ----

TEST(ConfigHealth, Defaults) {
  const Config c = load(kModels);
  EXPECT_EQ(c.health.interval, milliseconds(5'000));
  EXPECT_EQ(c.health.timeout, milliseconds(3'000));
  EXPECT_EQ(c.health.path, "/health");
  EXPECT_EQ(c.health.unhealthy_after, 3u);
  EXPECT_EQ(c.health.healthy_after, 2u);
  EXPECT_EQ(c.health.eject_after, 3u);
  // A model without its own health section gets the global (here default) values.
  const HealthConfig& m = c.models[0].health;
  EXPECT_EQ(m.interval, milliseconds(5'000));
  EXPECT_EQ(m.timeout, milliseconds(3'000));
  EXPECT_EQ(m.path, "/health");
  EXPECT_EQ(m.unhealthy_after, 3u);
  EXPECT_EQ(m.healthy_after, 2u);
  EXPECT_EQ(m.eject_after, 3u);
}

TEST(ConfigHealth, EmptySectionsKeepDefaults) {
  const Config c =
      load("models:\n  - name: m\n    health:\n  - name: n\n    health: {}\nhealth:\n");
  EXPECT_EQ(c.health.interval, milliseconds(5'000));
  EXPECT_EQ(c.models[0].health.path, "/health");
  EXPECT_EQ(c.models[1].health.eject_after, 3u);
}

TEST(ConfigHealth, EveryGlobalKeyIsReadAndInherited) {
  const Config c = load(std::string(kModels) + R"(health:
  interval: 10s
  timeout: 1500ms
  path: /v1/models
  unhealthy_after: 5
  healthy_after: 1
  eject_after: 7
)");
  for (const HealthConfig* h : {&c.health, &c.models[0].health}) {
    EXPECT_EQ(h->interval, milliseconds(10'000));
    EXPECT_EQ(h->timeout, milliseconds(1'500));
    EXPECT_EQ(h->path, "/v1/models");
    EXPECT_EQ(h->unhealthy_after, 5u);
    EXPECT_EQ(h->healthy_after, 1u);
    EXPECT_EQ(h->eject_after, 7u);
  }
}

TEST(ConfigHealth, ModelOverrideResolvesOverGlobal) {
  // The model section comes before the global one in the file: order does not matter.
  const Config c = load(R"(models:
  - name: plain
  - name: openai
    health:
      path: /v1/models
      unhealthy_after: 6
  - name: slow
    health: {interval: 30s, timeout: 20s, healthy_after: 4, eject_after: 1}
health:
  interval: 8s
  timeout: 2s
  eject_after: 5
)");
  const HealthConfig& plain = c.models[0].health;
  EXPECT_EQ(plain.interval, milliseconds(8'000));
  EXPECT_EQ(plain.timeout, milliseconds(2'000));
  EXPECT_EQ(plain.path, "/health");
  EXPECT_EQ(plain.unhealthy_after, 3u);
  EXPECT_EQ(plain.healthy_after, 2u);
  EXPECT_EQ(plain.eject_after, 5u);
  const HealthConfig& openai = c.models[1].health;
  EXPECT_EQ(openai.interval, milliseconds(8'000));  // global
  EXPECT_EQ(openai.timeout, milliseconds(2'000));   // global
  EXPECT_EQ(openai.path, "/v1/models");             // own
  EXPECT_EQ(openai.unhealthy_after, 6u);            // own
  EXPECT_EQ(openai.healthy_after, 2u);              // default
  EXPECT_EQ(openai.eject_after, 5u);                // global
  const HealthConfig& slow = c.models[2].health;
  EXPECT_EQ(slow.interval, milliseconds(30'000));
  EXPECT_EQ(slow.timeout, milliseconds(20'000));
  EXPECT_EQ(slow.path, "/health");
  EXPECT_EQ(slow.unhealthy_after, 3u);
  EXPECT_EQ(slow.healthy_after, 4u);
  EXPECT_EQ(slow.eject_after, 1u);
  // The global settings are untouched by the overrides.
  EXPECT_EQ(c.health.interval, milliseconds(8'000));
  EXPECT_EQ(c.health.path, "/health");
  EXPECT_EQ(c.health.eject_after, 5u);
}

TEST(ConfigHealth, ZeroDurationsRejected) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  interval: 0s\n", 4, "health.interval",
                         "must be greater than 0"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  timeout: 0ms\n", 4, "health.timeout",
                         "must be greater than 0"));
  EXPECT_TRUE(fails_with("models:\n  - name: m\n    health:\n      interval: 0s\n", 4,
                         "models[0].health.interval", "must be greater than 0"));
}

TEST(ConfigHealth, BadDurations) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  interval: 5\n", 4, "health.interval",
                         "expected a duration such as 5s, got \"5\" (add a unit"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  timeout: soon\n", 4, "health.timeout",
                         "expected a duration such as 3s, got \"soon\""));
  EXPECT_TRUE(fails_with("models:\n  - name: m\n    health: {timeout: [1s]}\n", 3,
                         "models[0].health.timeout", "got a list"));
}

TEST(ConfigHealth, ZeroThresholdsRejected) {
  for (const char* key : {"unhealthy_after", "healthy_after", "eject_after"}) {
    EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  " + key + ": 0\n", 4,
                           std::string("health.") + key, "must be greater than 0"));
    EXPECT_TRUE(fails_with("models:\n  - name: m\n    health:\n      " + std::string(key) + ": 0\n",
                           4, std::string("models[0].health.") + key, "must be greater than 0"));
  }
}

TEST(ConfigHealth, BadThresholdValues) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  unhealthy_after: -1\n", 4,
                         "health.unhealthy_after", "must not be negative"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  healthy_after: two\n", 4,
                         "health.healthy_after", "expected a whole number, got \"two\""));
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  eject_after: 4294967296\n", 4,
                         "health.eject_after", "must be at most 4294967295"));
}

TEST(ConfigHealth, BadPath) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  path: health\n", 4, "health.path",
                         "starting with \"/\" such as /health"));
  EXPECT_TRUE(
      fails_with(std::string(kModels) + "health:\n  path:\n", 4, "health.path", "got \"\""));
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  path: \"/a b\"\n", 4, "health.path",
                         "no spaces"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  path: {p: /x}\n", 4, "health.path",
                         "expected a string, got a map"));
  EXPECT_TRUE(fails_with("models:\n  - name: m\n  - name: n\n    health:\n      path: v1/models\n",
                         5, "models[1].health.path", "got \"v1/models\""));
}

TEST(ConfigHealth, PathWithQueryIsAccepted) {
  EXPECT_EQ(
      load(std::string(kModels) + "health: {path: \"/health?include_slots=1\"}\n").health.path,
      "/health?include_slots=1");
}

TEST(ConfigHealth, GlobalTimeoutNotBelowInterval) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  interval: 2s\n  timeout: 2s\n", 5,
                         "health.timeout",
                         "the probe timeout must be less than the interval, got timeout 2s "
                         "(health.timeout) and interval 2s (health.interval)"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  timeout: 6s\n", 4, "health.timeout",
                         "got timeout 6s (health.timeout) and interval 5s (default)"));
}

TEST(ConfigHealth, GlobalIntervalBelowDefaultTimeoutBlamesInterval) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  path: /h\n  interval: 2s\n", 5,
                         "health.interval",
                         "got timeout 3s (default) and interval 2s (health.interval)"));
}

TEST(ConfigHealth, ModelTimeoutNotBelowResolvedInterval) {
  EXPECT_TRUE(fails_with(R"(health:
  interval: 4s
models:
  - name: m
    health:
      timeout: 4s
)",
                         6, "models[0].health.timeout",
                         "got timeout 4s (models[0].health.timeout) and interval 4s "
                         "(health.interval)"));
}

TEST(ConfigHealth, ModelIntervalBelowInheritedTimeout) {
  EXPECT_TRUE(fails_with(R"(models:
  - name: a
  - name: b
    health:
      path: /x
      interval: 1s
health: {timeout: 1500ms}
)",
                         6, "models[1].health.interval",
                         "got timeout 1500ms (health.timeout) and interval 1s "
                         "(models[1].health.interval)"));
  // And against the default timeout.
  EXPECT_TRUE(fails_with("models:\n  - name: m\n    health: {interval: 3s}\n", 3,
                         "models[0].health.interval",
                         "got timeout 3s (default) and interval 3s (models[0].health.interval)"));
}

TEST(ConfigHealth, ModelMayFixGlobalPairOnlyForItself) {
  // The global pair is valid; the model raises both. Another model keeps the global values.
  const Config c = load(R"(health: {interval: 5s, timeout: 3s}
models:
  - name: a
    health: {interval: 60s, timeout: 10s}
  - name: b
)");
  EXPECT_EQ(c.models[0].health.timeout, milliseconds(10'000));
  EXPECT_EQ(c.models[1].health.timeout, milliseconds(3'000));
}

TEST(ConfigHealth, TimeoutJustBelowIntervalIsFine) {
  const Config c = load(std::string(kModels) + "health: {interval: 1s, timeout: 999ms}\n");
  EXPECT_EQ(c.health.timeout, milliseconds(999));
}

TEST(ConfigHealth, UnknownKeysSuggest) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "health:\n  unhealty_after: 3\n", 4,
                         "health.unhealty_after", "did you mean 'unhealthy_after'?"));
  EXPECT_TRUE(fails_with("models:\n  - name: m\n    health:\n      intervall: 5s\n", 4,
                         "models[0].health.intervall", "did you mean 'interval'?"));
  EXPECT_TRUE(
      fails_with(std::string(kModels) + "helth: {}\n", 3, "helth", "did you mean 'health'?"));
  EXPECT_TRUE(fails_with("models:\n  - name: m\n    healt: {}\n", 3, "models[0].healt",
                         "did you mean 'health'?"));
}

TEST(ConfigHealth, SectionMustBeAMap) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "health: 5s\n", 3, "health", "expected a map"));
  EXPECT_TRUE(fails_with("models:\n  - name: m\n    health: [a]\n", 3, "models[0].health",
                         "expected a map, got a list"));
}

// ---- Registration ----

TEST(ConfigRegistration, Defaults) {
  const Config c = load(kModels);
  EXPECT_EQ(c.registration.token_env, "");
  EXPECT_FALSE(c.registration.enabled());
  EXPECT_TRUE(c.registration.allowed_urls.empty());
  EXPECT_EQ(c.registration.expire_after, milliseconds(600'000));
  EXPECT_EQ(c.registration.heartbeat_interval, milliseconds(10'000));
  EXPECT_TRUE(c.registration.url_challenge);
  const Config e = load(std::string(kModels) + "registration:\n");
  EXPECT_FALSE(e.registration.enabled());
  EXPECT_EQ(e.registration.expire_after, milliseconds(600'000));
}

TEST(ConfigRegistration, EveryKeyIsRead) {
  const Config c = load(std::string(kModels) + R"(registration:
  token_env: FLEETGATE_REGISTRATION_TOKEN
  allowed_urls:
    - "https://*.acu.run"
    - "http://127.0.0.1:*"
  expire_after: 5m
  heartbeat_interval: 30s
  url_challenge: false
)");
  EXPECT_TRUE(c.registration.enabled());
  EXPECT_FALSE(c.registration.url_challenge);
  EXPECT_EQ(c.registration.token_env, "FLEETGATE_REGISTRATION_TOKEN");
  ASSERT_EQ(c.registration.allowed_urls.size(), 2u);
  EXPECT_EQ(c.registration.allowed_urls[0], "https://*.acu.run");
  EXPECT_EQ(c.registration.allowed_urls[1], "http://127.0.0.1:*");
  EXPECT_EQ(c.registration.expire_after, milliseconds(300'000));
  EXPECT_EQ(c.registration.heartbeat_interval, milliseconds(30'000));
}

TEST(ConfigRegistration, AllowedUrlsWithoutTokenIsFine) {
  const Config c = load(std::string(kModels) + "registration: {allowed_urls: [\"https://*\"]}\n");
  EXPECT_FALSE(c.registration.enabled());
  EXPECT_EQ(c.registration.allowed_urls.size(), 1u);
}

TEST(ConfigRegistration, TokenWithoutAllowedUrls) {
  // Key absent: blame the token_env line.
  EXPECT_TRUE(
      fails_with(std::string(kModels) + "registration:\n  expire_after: 1m\n  token_env: T\n", 5,
                 "registration.allowed_urls",
                 "empty while registration.token_env is set, so every registration "
                 "would be refused"));
  // Written but empty: blame its own line.
  EXPECT_TRUE(
      fails_with(std::string(kModels) + "registration:\n  token_env: T\n  allowed_urls: []\n", 5,
                 "registration.allowed_urls", "every registration would be refused"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "registration:\n  token_env: T\n  allowed_urls:\n",
                         5, "registration.allowed_urls", "e.g. \"https://*.acu.run\""));
}

TEST(ConfigRegistration, EmptyTokenEnvDisables) {
  const Config c = load(std::string(kModels) + "registration: {token_env: \"\"}\n");
  EXPECT_FALSE(c.registration.enabled());
}

TEST(ConfigRegistration, BadTokenEnvName) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "registration:\n  token_env: REG-TOKEN\n", 4,
                         "registration.token_env", "environment variable name"));
}

TEST(ConfigRegistration, PatternSchemeRequired) {
  EXPECT_TRUE(fails_with(std::string(kModels) +
                             "registration:\n  allowed_urls:\n    - https://*.acu.run\n    - "
                             "\"*.acu.run\"\n",
                         6, "registration.allowed_urls[1]",
                         "invalid URL pattern \"*.acu.run\": must start with http:// or https://"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "registration:\n  allowed_urls: [\"ftp://x\"]\n", 4,
                         "registration.allowed_urls[0]", "must start with http:// or https://"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "registration:\n  allowed_urls: [\"http*://x\"]\n",
                         4, "registration.allowed_urls[0]", "must start with http://"));
}

TEST(ConfigRegistration, PatternsThatCouldNeverMatch) {
  const auto bad = [](const std::string& pattern, const std::string& what) {
    return fails_with(
        std::string(kModels) + "registration:\n  allowed_urls:\n    - \"" + pattern + "\"\n", 5,
        "registration.allowed_urls[0]", what);
  };
  EXPECT_TRUE(bad("https://", "missing host"));
  EXPECT_TRUE(bad("http:///x", "missing host"));
  EXPECT_TRUE(bad("HTTPS://x.acu.run", "must start with http:// or https://"));
  EXPECT_TRUE(bad("https://X.acu.run", "lower case"));
  EXPECT_TRUE(bad("https://*.acu.run/", "must not end with '/'"));
  EXPECT_TRUE(bad("https://*.acu.run:443", "omit the default port 443"));
  EXPECT_TRUE(bad("http://*:80", "omit the default port 80"));
  EXPECT_TRUE(bad("https://a b", "spaces"));
}

TEST(ConfigRegistration, NonDefaultPortsInPatternsAreFine) {
  const Config c = load(
      std::string(kModels) +
      "registration:\n  allowed_urls: [\"https://*:8443\", \"http://*:443\", \"http://h/*\"]\n");
  EXPECT_EQ(c.registration.allowed_urls.size(), 3u);
}

TEST(ConfigRegistration, AllowedUrlsShape) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "registration:\n  allowed_urls: https://*\n", 4,
                         "registration.allowed_urls", "expected a list of URL patterns"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "registration:\n  allowed_urls:\n    - {a: b}\n", 5,
                         "registration.allowed_urls[0]", "expected a URL pattern, got a map"));
}

TEST(ConfigRegistration, Durations) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "registration:\n  expire_after: 0s\n", 4,
                         "registration.expire_after", "must be greater than 0"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "registration:\n  heartbeat_interval: 0ms\n", 4,
                         "registration.heartbeat_interval", "must be greater than 0"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "registration:\n  expire_after: 10\n", 4,
                         "registration.expire_after",
                         "expected a duration such as 600s, got \"10\" (add a unit"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "registration:\n  heartbeat_interval: often\n", 4,
                         "registration.heartbeat_interval", "such as 10s"));
}

TEST(ConfigRegistration, UrlChallengeIsABoolean) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "registration:\n  url_challenge: maybe\n", 4,
                         "registration.url_challenge", "maybe"));
}

TEST(ConfigRegistration, UnknownKeySuggests) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "registration:\n  allowed_url: []\n", 4,
                         "registration.allowed_url", "did you mean 'allowed_urls'?"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "registraton: {}\n", 3, "registraton",
                         "did you mean 'registration'?"));
}

// ---- Admin token ----

TEST(ConfigAdmin, TokenEnv) {
  EXPECT_EQ(load(kModels).admin.token_env, "");
  EXPECT_EQ(
      load(std::string(kModels) + "admin: {token_env: FLEETGATE_ADMIN_TOKEN}\n").admin.token_env,
      "FLEETGATE_ADMIN_TOKEN");
  EXPECT_EQ(load(std::string(kModels) + "admin:\n  token_env:\n").admin.token_env, "");
  EXPECT_TRUE(
      fails_with(std::string(kModels) + "admin:\n  listen: 127.0.0.1:9191\n  token_env: 9X\n", 5,
                 "admin.token_env", "environment variable name"));
  EXPECT_TRUE(fails_with(std::string(kModels) + "admin:\n  tokenenv: X\n", 4, "admin.tokenenv",
                         "did you mean 'token_env'?"));
}

// ---- glob_match ----

TEST(ConfigGlob, Literals) {
  EXPECT_TRUE(glob_match("", ""));
  EXPECT_FALSE(glob_match("", "a"));
  EXPECT_FALSE(glob_match("a", ""));
  EXPECT_TRUE(glob_match("https://x.acu.run", "https://x.acu.run"));
  EXPECT_FALSE(glob_match("https://x.acu.run", "https://x.acu.ru"));
  EXPECT_FALSE(glob_match("https://x.acu.run", "https://x.acu.run2"));
  EXPECT_FALSE(glob_match("https://x.acu.run", "http://x.acu.run"));
}

TEST(ConfigGlob, CaseSensitive) {
  EXPECT_FALSE(glob_match("https://x.acu.run", "https://X.acu.run"));
  EXPECT_FALSE(glob_match("https://*.ACU.run", "https://x.acu.run"));
}

TEST(ConfigGlob, StarMatchesAnyRunIncludingNone) {
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("*", "abc"));
  EXPECT_TRUE(glob_match("**", "abc"));
  EXPECT_TRUE(glob_match("a*", "a"));
  EXPECT_TRUE(glob_match("a*c", "ac"));
  EXPECT_TRUE(glob_match("a*c", "abbbc"));
  EXPECT_FALSE(glob_match("a*c", "abbb"));
  EXPECT_TRUE(glob_match("*c", "cccc"));
  EXPECT_TRUE(glob_match("a*b*c", "axxbyyc"));
  EXPECT_TRUE(glob_match("a*b*c", "abcbc"));
  EXPECT_FALSE(glob_match("a*b*c", "acb"));
}

TEST(ConfigGlob, QuestionMarkMatchesExactlyOne) {
  EXPECT_TRUE(glob_match("a?c", "abc"));
  EXPECT_FALSE(glob_match("a?c", "ac"));
  EXPECT_FALSE(glob_match("a?c", "abbc"));
  EXPECT_TRUE(glob_match("http://127.0.0.1:70??", "http://127.0.0.1:7001"));
  EXPECT_FALSE(glob_match("http://127.0.0.1:70??", "http://127.0.0.1:700"));
}

TEST(ConfigGlob, AcuRunHosts) {
  EXPECT_TRUE(glob_match("https://*.acu.run", "https://a1b2.acu.run"));
  EXPECT_TRUE(glob_match("https://*.acu.run", "https://a.b.acu.run"));  // '*' spans dots
  EXPECT_FALSE(glob_match("https://*.acu.run", "https://a1b2.acu.run.evil.com"));
  EXPECT_FALSE(glob_match("https://*.acu.run", "https://acu.run"));
  EXPECT_FALSE(glob_match("https://*.acu.run", "http://a1b2.acu.run"));
  EXPECT_FALSE(glob_match("https://*.acu.run", "https://a1b2.acu.run:8443/"));
}

TEST(ConfigGlob, WildcardsDoNotMatchSlash) {
  // The host part of a pattern cannot swallow a path.
  EXPECT_FALSE(glob_match("https://*.acu.run", "https://evil.com/x.acu.run"));
  EXPECT_FALSE(glob_match("https://*.acu.run", "https://a1b2.acu.run/v1"));
  EXPECT_FALSE(glob_match("https://?", "https:///"));
  EXPECT_FALSE(glob_match("*", "a/b"));
  // A path segment must be allowed explicitly.
  EXPECT_TRUE(glob_match("https://*.acu.run/*", "https://a1b2.acu.run/v1"));
  EXPECT_FALSE(glob_match("https://*.acu.run/*", "https://a1b2.acu.run/v1/x"));
  EXPECT_TRUE(glob_match("https://*.acu.run/*/*", "https://a1b2.acu.run/v1/x"));
}

TEST(ConfigGlob, LocalPorts) {
  EXPECT_TRUE(glob_match("http://127.0.0.1:*", "http://127.0.0.1:7001"));
  EXPECT_TRUE(glob_match("http://127.0.0.1:*", "http://127.0.0.1:"));
  EXPECT_FALSE(glob_match("http://127.0.0.1:*", "http://127.0.0.1"));
  EXPECT_FALSE(glob_match("http://127.0.0.1:*", "http://127.0.0.1:7001/prefix"));
  EXPECT_FALSE(glob_match("http://127.0.0.1:*", "http://127.0.0.10:7001"));
  EXPECT_FALSE(glob_match("http://127.0.0.1:*", "https://127.0.0.1:7001"));
}

TEST(ConfigGlob, OtherCharactersAreLiteral) {
  EXPECT_TRUE(glob_match("http://[::1]:*", "http://[::1]:7001"));
  EXPECT_FALSE(glob_match("a.c", "abc"));
  EXPECT_FALSE(glob_match("[ab]", "a"));
  EXPECT_TRUE(glob_match("[ab]", "[ab]"));
}

TEST(ConfigGlob, ManyStarsStayFast) {
  // Backtracking-free: a pathological pattern answers at once.
  const std::string text(2000, 'a');
  EXPECT_FALSE(glob_match("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", text));
  EXPECT_TRUE(glob_match("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*", text));
}

// ---- The file as a whole ----

TEST(ConfigFile, SyntaxErrorNamesLine) {
  EXPECT_TRUE(fails_with("models:\n  - name: a\n    slots: [1, 2\n", 4, "(syntax)"));
}

TEST(ConfigFile, SyntaxErrorBadIndent) {
  const std::string error = error_of("models:\n  - name: a\nlog:\n  level: info\n bad: x\n");
  EXPECT_EQ(error.rfind("t.yaml:5: (syntax): ", 0), 0u) << error;
}

TEST(ConfigFile, EmptyFile) {
  EXPECT_TRUE(fails_with("", 1, "models", "the file is empty"));
  EXPECT_TRUE(fails_with("# only a comment\n\n", 1, "models", "the file is empty"));
}

TEST(ConfigFile, RootNotAMap) {
  EXPECT_TRUE(fails_with("- name: m\n", 1, "(root)", "got a list"));
  EXPECT_TRUE(fails_with("\n\nhello\n", 3, "(root)", "got \"hello\""));
}

TEST(ConfigFile, SecondDocumentRejected) {
  EXPECT_TRUE(fails_with(std::string(kModels) + "---\nlog: {level: info}\n", 4, "(root)",
                         "only one YAML document"));
}

TEST(ConfigFile, SourceNameInMessage) {
  try {
    load_config_string("models: []\n", "conf/x.yaml");
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "conf/x.yaml:1: models: at least one model is required");
  }
}

TEST(ConfigFile, UnreadableFile) {
  const std::string path = std::string(FG_SOURCE_DIR) + "/config/does-not-exist.yaml";
  try {
    load_config_file(path);
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": cannot read", 0), 0u) << e.what();
  }
}

TEST(ConfigFile, ShippedExampleIsValid) {
  const Config c = load_config_file(std::string(FG_SOURCE_DIR) + "/config/example.yaml");
  ASSERT_FALSE(c.models.empty());
  for (const auto& m : c.models) {
    for (const auto& ep : m.endpoints) {
      EXPECT_TRUE(ep.url.tls()) << ep.url.to_string();
    }
  }
  EXPECT_EQ(c.admin.token_env, "FLEETGATE_ADMIN_TOKEN");
  EXPECT_EQ(c.health.interval, HealthConfig{}.interval);
  EXPECT_EQ(c.health.path, "/health");
  EXPECT_TRUE(c.registration.enabled());
  EXPECT_FALSE(c.registration.allowed_urls.empty());
  // Every shipped endpoint would also be accepted if it registered itself.
  for (const auto& m : c.models) {
    for (const auto& ep : m.endpoints) {
      bool allowed = false;
      for (const auto& pattern : c.registration.allowed_urls) {
        allowed = allowed || glob_match(pattern, ep.url.to_string());
      }
      EXPECT_TRUE(allowed) << ep.url.to_string();
    }
  }
  const ModelConfig* small = c.find_model("qwen3.5-0.8b");
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->health.path, "/v1/models");
  EXPECT_EQ(small->health.unhealthy_after, 2u);
  EXPECT_EQ(small->health.interval, c.health.interval);
}

TEST(ConfigFile, ShippedLocalIsValid) {
  const Config c = load_config_file(std::string(FG_SOURCE_DIR) + "/config/local.yaml");
  EXPECT_EQ(c.server.listen.to_string(), "127.0.0.1:8080");
  EXPECT_EQ(c.admin.listen.to_string(), "127.0.0.1:9090");
  ASSERT_EQ(c.models.size(), 1u);
  const ModelConfig& m = c.models[0];
  EXPECT_EQ(m.name, "qwen3.5-0.8b");
  EXPECT_EQ(m.replicas, 4u);
  EXPECT_EQ(m.slots, 1u);
  EXPECT_TRUE(m.endpoints.empty());
  ASSERT_TRUE(m.local.has_value());
  EXPECT_EQ(m.local->count, 4u);
  EXPECT_EQ(m.local->profile, "qwen3.5-0.8b/snapdragon-8-elite");
  EXPECT_EQ(m.local->slots, 1u);
}

}  // namespace
}  // namespace fg::config

namespace fg::config {
namespace {

Config load_local(const std::string& local) {
  return load_config_string("models:\n  - name: m\n    local: " + local + "\n", "t.yaml");
}

std::string local_error(const std::string& local) {
  try {
    load_local(local);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigLocal, DefaultsAndValues) {
  auto c = load_local("{count: 4, profile: qwen3.5-0.8b/snapdragon-8-elite, time_scale: 2.5}");
  ASSERT_TRUE(c.models[0].local.has_value());
  EXPECT_EQ(c.models[0].local->count, 4u);
  EXPECT_EQ(c.models[0].local->engine, "sim");
  EXPECT_DOUBLE_EQ(c.models[0].local->time_scale, 2.5);
  EXPECT_EQ(c.models[0].local->slots, 0u);
  EXPECT_EQ(c.models[0].desired_replicas(), 4u);
  auto d = load_local("{}");
  EXPECT_EQ(d.models[0].local->count, 1u);
  EXPECT_EQ(d.models[0].local->profile, "fast-test");
}

TEST(ConfigLocal, Errors) {
  EXPECT_NE(local_error("{count: 0}").find("t.yaml:3: models[0].local.count"), std::string::npos);
  EXPECT_NE(local_error("{engine: llama-server}").find("models[0].local.engine"),
            std::string::npos);
  EXPECT_NE(local_error("{profile: pixel-9}").find("unknown simulator profile"), std::string::npos);
  EXPECT_NE(local_error("{time_scale: 0}").find("models[0].local.time_scale"), std::string::npos);
  EXPECT_NE(local_error("{time_scale: fast}").find("models[0].local.time_scale"),
            std::string::npos);
  EXPECT_NE(local_error("{cuont: 2}").find("did you mean 'count'"), std::string::npos);
}

}  // namespace
}  // namespace fg::config

namespace fg::config {
namespace {

TEST(ConfigMetrics, DefaultsValuesAndErrors) {
  const std::string models = "models:\n  - name: m\n";
  auto d = load_config_string(models, "t.yaml");
  EXPECT_TRUE(d.metrics.per_replica);
  EXPECT_TRUE(d.metrics.request_stream_usage);
  EXPECT_EQ(d.admin.prometheus_sd_file, "");
  auto c = load_config_string(models +
                                  "metrics: {per_replica: false, request_stream_usage: false}\n"
                                  "admin: {prometheus_sd_file: /tmp/agents.json}\n",
                              "t.yaml");
  EXPECT_FALSE(c.metrics.per_replica);
  EXPECT_FALSE(c.metrics.request_stream_usage);
  EXPECT_EQ(c.admin.prometheus_sd_file, "/tmp/agents.json");
  try {
    load_config_string(models + "metrics:\n  per_replica: maybe\n", "t.yaml");
    FAIL() << "accepted a non-boolean";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("t.yaml:4: metrics.per_replica: expected true or false"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fg::config
