// Tool-call formats: inference as in mlx_lm/tokenizer_utils.py's _infer_tool_parser, parsing as in
// mlx_lm/tool_parsers/json_tools.py, formatting as mlx_lm.server's ToolCallFormatter (mlx-lm 0.32.2).
#include "mlxrt/server/tool_calls.h"

#include <cstdio>
#include <random>
#include <stdexcept>

#include "mlxrt/server/python_json.h"

namespace mlxrt::server {

namespace {

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

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
  if (type == "json_tools") {
    // Qwen/Hermes style: <tool_call>{"name": ..., "arguments": {...}}</tool_call>
    return ToolParser{type, "<tool_call>", "</tool_call>",
                      [](const std::string& text, const nlohmann::ordered_json&) {
                        try {
                          return nlohmann::ordered_json::parse(strip(text));
                        } catch (const nlohmann::json::exception& e) {
                          throw std::invalid_argument(e.what());
                        }
                      }};
  }
  return std::nullopt;
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
      if (!tc.is_object() || !tc.contains("name") || !tc.contains("arguments")) continue;
      std::string id;
      if (auto it = tc.find("id"); it != tc.end()) {
        if (it->is_string()) id = it->get<std::string>();
        tc.erase("id");
      }
      if (id.empty()) id = uuid4();
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
