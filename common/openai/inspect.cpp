#include "common/openai/inspect.hpp"

#include <cctype>

#include <nlohmann/json.hpp>

#include "common/util/json.hpp"

namespace fg::openai {

namespace {

constexpr std::string_view kJsonMediaType = "application/json";

InspectError bad_request(std::string code, std::string param, std::string message) {
  return InspectError{400, std::move(code), std::move(param), std::move(message)};
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// "application/json", optionally followed by parameters ("; charset=utf-8").
bool is_json_content_type(std::string_view content_type) {
  const std::size_t semicolon = content_type.find(';');
  return iequals(trim(content_type.substr(0, semicolon)), kJsonMediaType);
}

bool present(const nlohmann::json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && !it->is_null();
}

bool is_true(const nlohmann::json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_boolean() && it->get<bool>();
}

InspectError stateful(std::string param, std::string what) {
  return bad_request("unsupported_stateful_request", std::move(param),
                     what +
                         " needs a response kept on the server, and no replica of this gateway "
                         "keeps one (any phone may serve the next request); send the whole "
                         "conversation in 'input' instead (and leave 'store' out or false)");
}

// The Responses API's requests that only work against a server that keeps responses.
std::optional<InspectError> stateful_refusal(const nlohmann::json& doc) {
  if (present(doc, "previous_response_id")) {
    return stateful("previous_response_id", "'previous_response_id'");
  }
  if (present(doc, "conversation")) {
    return stateful("conversation", "'conversation'");
  }
  if (is_true(doc, "store")) {
    return stateful("store", "'store': true");
  }
  if (is_true(doc, "background")) {
    return stateful("background", "'background': true");
  }
  auto input = doc.find("input");
  if (input != doc.end() && input->is_array()) {
    for (const auto& item : *input) {
      auto type = item.is_object() ? item.find("type") : item.end();
      if (item.is_object() && type != item.end() && *type == "item_reference") {
        return stateful("input", "an input item of type 'item_reference'");
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::variant<RequestInfo, InspectError> inspect_request(std::string_view content_type,
                                                        std::string_view body) {
  return inspect_request(Api::openai, content_type, body);
}

std::variant<RequestInfo, InspectError> inspect_request(Api api, std::string_view content_type,
                                                        std::string_view body) {
  if (!is_json_content_type(content_type)) {
    return InspectError{415, "unsupported_media_type", "", "Content-Type must be application/json"};
  }
  if (body.empty()) {
    return bad_request("invalid_json", "", "request body is empty; expected a JSON object");
  }
  if (!json_depth_within(body)) {
    return bad_request(
        "invalid_json", "",
        "request body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() quotes the text around the error, so only the byte offset is reported.
    return bad_request(
        "invalid_json", "",
        "request body is not valid JSON (error at byte " + std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::exception&) {
    return bad_request("invalid_json", "", "request body is not valid JSON");
  }
  if (!doc.is_object()) {
    return bad_request("invalid_request", "", "request body must be a JSON object");
  }

  RequestInfo info;
  const auto model = doc.find("model");
  if (model == doc.end() || model->is_null()) {
    return bad_request("missing_model", "model", "you must provide a model parameter");
  }
  if (!model->is_string()) {
    return bad_request("invalid_model", "model", "'model' must be a string");
  }
  info.model = model->get<std::string>();
  if (info.model.empty()) {
    return bad_request("missing_model", "model", "you must provide a model parameter");
  }

  // null is accepted wherever an optional field is: OpenAI and its SDKs treat it as "not given".
  const auto stream = doc.find("stream");
  if (stream != doc.end() && !stream->is_null()) {
    if (!stream->is_boolean()) {
      return bad_request("invalid_type", "stream", "'stream' must be a boolean");
    }
    info.stream = stream->get<bool>();
  }

  const auto options = doc.find("stream_options");
  if (options != doc.end() && !options->is_null()) {
    if (!options->is_object()) {
      return bad_request("invalid_type", "stream_options", "'stream_options' must be an object");
    }
    const auto usage = options->find("include_usage");
    if (usage != options->end() && !usage->is_null()) {
      if (!usage->is_boolean()) {
        return bad_request("invalid_type", "stream_options.include_usage",
                           "'stream_options.include_usage' must be a boolean");
      }
      info.include_usage = usage->get<bool>();
    }
  }
  if (api == Api::responses) {
    if (auto refusal = stateful_refusal(doc)) {
      return *std::move(refusal);
    }
  }
  return info;
}

}  // namespace fg::openai

namespace fg::openai {

std::optional<std::string> with_stream_usage(std::string_view body) {
  auto doc = nlohmann::ordered_json::parse(body, nullptr, false);
  if (!doc.is_object()) {
    return std::nullopt;
  }
  auto& options = doc["stream_options"];
  if (!options.is_object()) {
    options = nlohmann::ordered_json::object();
  }
  options["include_usage"] = true;
  return doc.dump();
}

}  // namespace fg::openai
