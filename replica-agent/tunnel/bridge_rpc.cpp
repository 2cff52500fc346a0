#include "replica-agent/tunnel/bridge_rpc.hpp"

#include "common/util/json.hpp"

namespace fg::agent::bridge {

std::string request_line(std::uint64_t id, std::string_view method, const nlohmann::json& params) {
  nlohmann::ordered_json request{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}};
  if (!params.is_null()) {
    request["params"] = params;
  }
  return request.dump() + "\n";
}

Answer parse_answer(std::string_view line, std::uint64_t id) {
  Answer answer;
  nlohmann::json doc = parse_network_json(line);
  if (!doc.is_object()) {
    answer.error = "malformed bridge answer";
    return answer;
  }
  auto got_id = doc.find("id");
  if (got_id == doc.end() || !got_id->is_number_unsigned() || got_id->get<std::uint64_t>() != id) {
    answer.error = "bridge answer to another request";
    return answer;
  }
  if (auto error = doc.find("error"); error != doc.end() && !error->is_null()) {
    std::string message = "bridge error";
    if (error->is_object()) {
      if (auto code = error->find("code"); code != error->end() && code->is_number_integer()) {
        message += " " + std::to_string(code->get<std::int64_t>());
      }
      if (auto text = error->find("message"); text != error->end() && text->is_string()) {
        message += ": " + text->get<std::string>().substr(0, 200);
      }
    }
    answer.error = message;
    return answer;
  }
  auto result = doc.find("result");
  if (result == doc.end()) {
    answer.error = "malformed bridge answer (no result)";
    return answer;
  }
  answer.result = *result;
  return answer;
}

nlohmann::json tunnel_start_params(const TunnelParams& params) {
  return nlohmann::json{{"serverAddrs", params.relays},
                        {"domainSuffix", params.domain_suffix},
                        {"localAddr", params.local_addr},
                        {"primaryKey", {{"algorithm", "Secp256r1"}, {"bytes", params.key}}},
                        {"acmeStaging", false}};
}

std::optional<std::string> tunnel_url(const nlohmann::json& result) {
  if (!result.is_object()) {
    return std::nullopt;
  }
  auto url = result.find("url");
  if (url == result.end() || !url->is_string() || url->get<std::string>().empty()) {
    return std::nullopt;
  }
  return url->get<std::string>();
}

std::optional<int> tunnel_state(const nlohmann::json& result) {
  const nlohmann::json* value = &result;
  if (result.is_object()) {
    auto state = result.find("state");
    if (state == result.end()) {
      return std::nullopt;
    }
    value = &*state;
  }
  if (!value->is_number_integer()) {
    return std::nullopt;
  }
  const auto state = value->get<std::int64_t>();
  if (state < 0 || state > 3) {
    return std::nullopt;
  }
  return static_cast<int>(state);
}

bool tunnel_down(int state) {
  return state != kTunnelConnecting && state != kTunnelConnected;
}

std::optional<std::string> deployment_id(const nlohmann::json& result) {
  if (result.is_string() && !result.get<std::string>().empty()) {
    return result.get<std::string>();
  }
  if (result.is_number_unsigned()) {
    return std::to_string(result.get<std::uint64_t>());
  }
  if (result.is_number_integer() && result.get<std::int64_t>() >= 0) {
    return std::to_string(result.get<std::int64_t>());
  }
  if (result.is_object()) {
    for (const char* key : {"deploymentId", "id"}) {
      if (auto it = result.find(key); it != result.end()) {
        return deployment_id(*it);
      }
    }
  }
  return std::nullopt;
}

}  // namespace fg::agent::bridge
