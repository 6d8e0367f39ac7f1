// Arbitrary bytes as a chat template, rendered over a small conversation with tight sandbox limits:
// parsing and rendering must succeed or throw mlxrt::Error (TemplateError / UsageError); never
// crash, hang, or grow without bound. Inputs may carry a JSON context after a "\n#ctx#\n" line.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "mlxrt/template/chat_template.h"
#include "mlxrt/util/errors.h"

namespace {

nlohmann::ordered_json default_messages() {
  return nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "Hello Café 世界 👋"},
    {"role": "assistant", "content": "", "reasoning_content": "r",
     "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]},
    {"role": "tool", "content": "{\"ok\": true}"}
  ])");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  if (auto p = input.find("\n#ctx#\n"); p != std::string::npos) {
    extra = nlohmann::ordered_json::parse(input.substr(p + 7), nullptr, false);
    if (extra.is_discarded() || !extra.is_object()) extra = nlohmann::ordered_json::object();
    input.resize(p);
  }
  static const nlohmann::ordered_json messages = default_messages();
  mlxrt::tmpl::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_loop_iterations = 20000;
  limits.max_call_depth = 50;
  mlxrt::tmpl::ChatTemplateOptions opts;
  opts.add_generation_prompt = size % 2 == 0;
  opts.extra = extra;
  opts.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  try {
    auto t = mlxrt::tmpl::ChatTemplate::parse(input, "fuzz");
    std::string out = t.render(messages, opts, {{"bos_token", "<s>"}, {"eos_token", "</s>"}}, limits);
    if (out.size() > limits.max_output_bytes) __builtin_trap();  // the sandbox promised this
  } catch (const mlxrt::Error&) {
  }
  return 0;
}
