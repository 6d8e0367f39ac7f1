// Tool-call formats: inference as in mlx_lm/tokenizer_utils.py's _infer_tool_parser, parsing as in
// mlx_lm/tool_parsers/ (tool_parsers.cpp), formatting as mlx_lm.server's ToolCallFormatter (mlx-lm 0.32.2).
#include "mlxrt/server/tool_calls.h"

#include <cstdio>
#include <random>
#include <stdexcept>

#include "mlxrt/server/python_json.h"
#include "mlxrt/server/python_values.h"
#include "mlxrt/server/tool_parsers.h"

namespace mlxrt::server {

namespace {

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

}  // namespace

std::optional<std::string> infer_tool_parser_type(const std::string& t, const nlohmann::json& tokenizer_config,
                                                  const std::function<bool(const std::string&)>& has_token) {
  auto it = tokenizer_config.find("tool_parser_type");
  if (it != tokenizer_config.end() && it->is_string()) return it->get<std::string>();
  if (!t.empty()) {
    if (contains(t, "<minimax:tool_call>")) return "minimax_m2";
    if (contains(t, "<|tool_call>") && contains(t, "<tool_call|>")) return "gemma4";
    if (contains(t, "<start_function_call>")) return "function_gemma";
    if (contains(t, "<longcat_tool_call>")) return "longcat";
    if (contains(t, "<arg_key>")) return "glm47";
    if (contains(t, "<|tool_list_start|>") || contains(t, "<|tool_call_start|>")) return "pythonic";
    if (contains(t, "<tool_call>\\n<function=") || contains(t, "<tool_call>\n<function=")) return "qwen3_coder";
    if (contains(t, "<|tool_calls_section_begin|>")) return "kimi_k2";
    if (contains(t, "<function name=\"") && contains(t, "<param name=\"")) return "minicpm5";
    if (contains(t, "[TOOL_CALLS]")) return "mistral";
    if (contains(t, "<atem:function_calls>")) return "muse_spark";
    if (contains(t, "<tool_call>") && contains(t, "tool_call.name")) return "json_tools";
  }
  if (has_token("<|open|>") && has_token("<|close|>") && has_token("<|sep|>") && has_token("<|end_of_msg|>"))
    return "kimi_k3";
  if (has_token("<|tool_call_start|>") && has_token("<|tool_call_end|>")) return "pythonic";
  return std::nullopt;
}

std::optional<ToolParser> make_tool_parser(const std::string& type) {
  const tool_parsers::Format* format = tool_parsers::find_format(type);
  if (!format) return std::nullopt;
  return ToolParser{type, format->start, format->end,
                    [format](const std::string& text, const nlohmann::ordered_json& tools) {
                      return format->parse(py::to_u32(text), tools);  // py::Error is an invalid_argument
                    }};
}

nlohmann::ordered_json ToolCallFormatter::operator()(const std::vector<std::string>& texts) {
  auto result = nlohmann::ordered_json::array();
  if (!parser_) return result;
  for (const auto& text : texts) {
    nlohmann::ordered_json parsed;
    try {
      parsed = parser_->parse(text, tools_);
    } catch (const std::invalid_argument&) {
      continue;  // cut off mid-call (max_tokens): mlx-lm drops it with a warning too
    }
    if (!parsed.is_array()) parsed = nlohmann::ordered_json::array({parsed});
    for (auto& tc : parsed) {
      // Where mlx-lm's _format raises (not a dict, no "arguments", arguments json.dumps cannot
      // write) mlx_lm.server drops the connection; the call is left out here.
      if (!tc.is_object() || !tc.contains("arguments") || py::is_unserializable(tc["arguments"])) continue;
      nlohmann::ordered_json id = nullptr;
      if (auto it = tc.find("id"); it != tc.end()) {
        id = *it;
        tc.erase(it);
      }
      if (!py::truthy(id)) id = uuid4();  // tc.pop("id", None) or str(uuid.uuid4())
      tc["arguments"] = python_dumps(tc["arguments"], DumpOptions{.ensure_ascii = false});
      nlohmann::ordered_json out = nlohmann::ordered_json::object();
      out["function"] = tc;
      out["type"] = "function";
      out["id"] = id;
      if (streaming_) out["index"] = index_++;
      result.push_back(std::move(out));
    }
  }
  return result;
}

std::string uuid4() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t hi = rng(), lo = rng();
  hi = (hi & 0xFFFFFFFFFFFF0FFFULL) | 0x0000000000004000ULL;
  lo = (lo & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xFFFF), static_cast<unsigned>(hi & 0xFFFF),
                static_cast<unsigned>(lo >> 48), static_cast<unsigned long long>(lo & 0xFFFFFFFFFFFFULL));
  return buf;
}

}  // namespace mlxrt::server
