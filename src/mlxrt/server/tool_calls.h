#pragma once
/** Tool calls in model output: which format a model uses (mlx_lm's _infer_tool_parser, from the
 * chat template), the text markers around a call, and turning the call text into OpenAI's
 * `tool_calls` entries (mlx_lm.server's ToolCallFormatter). */
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlxrt::server {

/** The parser mlx-lm would pick: tokenizer_config's tool_parser_type when set, else inferred from
 * the template text and the vocabulary (`has_token`), in mlx-lm's order. nullopt: no tool calling. */
std::optional<std::string> infer_tool_parser_type(const std::string& chat_template,
                                                  const nlohmann::json& tokenizer_config,
                                                  const std::function<bool(const std::string&)>& has_token);

struct ToolParser {
  std::string type;
  std::string start;  // e.g. "<tool_call>"
  std::string end;    // e.g. "</tool_call>"
  /** The text between the markers -> one call object {"name", "arguments", ...} or a list of
   * them. Throws std::invalid_argument when the text is not a call (e.g. cut off). */
  std::function<nlohmann::ordered_json(const std::string& text, const nlohmann::ordered_json& tools)> parse;
};

/** The parser for a type, or nullopt for a format this runtime does not read (the caller serves
 * the request without tool-call parsing, and says so once in the log). */
std::optional<ToolParser> make_tool_parser(const std::string& type);

/** mlx_lm.server's ToolCallFormatter: call texts -> [{"function": {name, arguments (JSON text)},
 * "type": "function", "id"}] (+ "index" when streaming, counting across calls). Texts that do not
 * parse are skipped. */
class ToolCallFormatter {
 public:
  ToolCallFormatter(const ToolParser* parser, nlohmann::ordered_json tools, bool streaming)
      : parser_(parser), tools_(std::move(tools)), streaming_(streaming) {}
  nlohmann::ordered_json operator()(const std::vector<std::string>& texts);

 private:
  const ToolParser* parser_;
  nlohmann::ordered_json tools_;
  bool streaming_;
  int index_ = 0;
};

/** A random (version 4) UUID in its 36-character text form. */
std::string uuid4();

}  // namespace mlxrt::server
