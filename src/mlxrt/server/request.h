#pragma once
/** A completion request as mlx_lm.server reads it, parsed into typed fields with the server's
 * defaults. Every field is type- and range-checked: a wrong type is a 400 naming the field, never
 * a silent default. Accepted aliases: max_completion_tokens for max_tokens (it wins when both
 * are given); stop as a string or a list of strings. */
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/server/options.h"

namespace mlxrt::server {

enum class Endpoint { chat, text };

struct CompletionRequest {
  Endpoint endpoint = Endpoint::chat;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string model = "default_model";
  std::optional<std::string> adapter;      // "adapters"
  std::optional<std::string> draft_model;  // "draft_model"
  int num_draft_tokens = 3;

  int max_tokens = 512;
  double temperature = 0.0;
  double top_p = 1.0;
  int top_k = 0;
  double min_p = 0.0;
  double xtc_probability = 0.0;
  double xtc_threshold = 0.1;
  double repetition_penalty = 0.0;
  int repetition_context_size = 20;
  double presence_penalty = 0.0;
  int presence_context_size = 20;
  double frequency_penalty = 0.0;
  int frequency_context_size = 20;
  std::vector<std::pair<int32_t, double>> logit_bias;  // document order
  bool logprobs = false;
  int top_logprobs = -1;  // -1: off
  std::optional<int64_t> seed;
  nlohmann::ordered_json chat_template_kwargs;  // null or an object
  std::vector<std::string> stop;
  /** response_format: "text" (unconstrained), "json_object" or "json_schema" (json_schema holds
   * the schema's JSON text, json_schema_strict its "strict"). */
  std::string response_format = "text";
  std::string json_schema;
  bool json_schema_strict = false;

  // chat
  nlohmann::ordered_json messages;      // a list of message objects
  nlohmann::ordered_json tools;         // null or a non-empty list
  /** tool_choice "required" or a named function (chat; the Anthropic and Responses APIs' any / tool /
   * required / function map to it): the reply must be a call of one of `tools` (then only the named
   * one), enforced by constrained decoding. "auto" and "none" leave the reply free, as mlx_lm.server
   * does (it reads no tool_choice). */
  bool force_tool_call = false;
  nlohmann::ordered_json role_mapping;  // null or an object
  // text
  std::string prompt;
};

/** Parses and validates a request body. HttpError(400, message naming the field) on anything
 * malformed. */
CompletionRequest parse_completion_request(std::string_view body, Endpoint endpoint,
                                           const ServerOptions& defaults);

/** The same, from a body already parsed (the other APIs translate theirs into this shape). */
CompletionRequest parse_completion_body(const nlohmann::ordered_json& body, Endpoint endpoint,
                                        const ServerOptions& defaults);

/** response_format (or the Responses API's text.format, `where` naming it) into r; HttpError(400)
 * naming the field when malformed or when the schema uses a keyword constrained decoding does not
 * enforce. */
void parse_response_format(const nlohmann::ordered_json& v, const std::string& where, CompletionRequest& r);

/** A request body as a JSON object; HttpError(400) when it is not valid JSON or not an object. */
nlohmann::ordered_json parse_request_body(std::string_view body);

}  // namespace mlxrt::server
