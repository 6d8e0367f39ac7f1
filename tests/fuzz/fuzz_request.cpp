// Arbitrary bytes as an HTTP request body for /v1/chat/completions (even first byte) or
// /v1/completions (odd): parsing into a CompletionRequest must succeed or throw HttpError with a
// 400; an accepted chat request is then rendered through a real chat template (Qwen3's, which uses
// tools, tool calls and reasoning) the way the server builds its prompt, and must render or throw
// mlxrt::Error (the server's 400). Never crash, hang or hit undefined behaviour.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "mlxrt/server/http_error.h"
#include "mlxrt/server/request.h"
#include "mlxrt/template/chat_template.h"
#include "mlxrt/util/errors.h"

namespace {

const mlxrt::tmpl::ChatTemplate& chat_template() {
  static const mlxrt::tmpl::ChatTemplate t = [] {
    std::ifstream f(MLXRT_FUZZ_SEEDS "/fuzz_template/Qwen-Qwen3-0.6B.jinja");
    std::stringstream text;
    text << f.rdbuf();
    if (text.str().find("tool_calls") == std::string::npos) __builtin_trap();  // the seed template is missing
    return mlxrt::tmpl::ChatTemplate::parse(text.str(), "Qwen3");
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto endpoint = data[0] % 2 == 0 ? mlxrt::server::Endpoint::chat : mlxrt::server::Endpoint::text;
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  static const mlxrt::server::ServerOptions defaults;
  mlxrt::server::CompletionRequest r;
  try {
    r = mlxrt::server::parse_completion_request(body, endpoint, defaults);
  } catch (const mlxrt::server::HttpError& e) {
    if (e.status() != 400) __builtin_trap();  // a client's bad body is a 400, never a 500
    return 0;
  }
  if (endpoint != mlxrt::server::Endpoint::chat) return 0;
  mlxrt::tmpl::ChatTemplateOptions opts;
  opts.add_generation_prompt = true;
  opts.tools = r.tools;
  opts.extra = r.chat_template_kwargs.is_object() ? r.chat_template_kwargs : nlohmann::ordered_json::object();
  mlxrt::tmpl::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_loop_iterations = 20000;
  limits.max_call_depth = 50;
  try {
    std::string out = chat_template().render(r.messages, opts, {{"bos_token", "<s>"}, {"eos_token", "</s>"}}, limits);
    if (out.size() > limits.max_output_bytes) __builtin_trap();
  } catch (const mlxrt::Error&) {
  }
  return 0;
}
