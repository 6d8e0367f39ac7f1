// libFuzzer target: the tool-call parsers of the server (tool_parsers.cpp, python_values.cpp) on
// arbitrary model output. The first byte picks the format and whether tools are given; the rest is
// the call text. A parser may reject the text (py::Error), never crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "mlxrt/server/python_json.h"
#include "mlxrt/server/tool_parsers.h"

namespace {

const char* const kTypes[] = {"json_tools", "qwen3_coder", "mistral", "gemma4",    "function_gemma",
                              "pythonic",   "glm47",       "kimi_k2", "kimi_k3",   "minimax_m2",
                              "minicpm5",   "longcat",     "laguna",  "muse_spark"};

const mlxrt::server::py::Json& tools() {
  static const auto t = mlxrt::server::py::Json::parse(R"([{"type": "function", "function": {"name": "f",
    "parameters": {"type": "object", "properties": {"x": {"type": "string"}, "n": {"type": "integer"},
    "v": {"type": "number"}, "b": {"type": "boolean"}, "o": {"type": "object"}, "a": {"type": "array"},
    "u": {"anyOf": [{"type": "null"}, {"type": "dict"}]}}}}}])");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto* format = mlxrt::server::tool_parsers::find_format(kTypes[data[0] % std::size(kTypes)]);
  bool with_tools = data[0] & 0x80;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    auto result = format->parse(mlxrt::server::py::to_u32(text), with_tools ? tools() : mlxrt::server::py::Json());
    if (!mlxrt::server::py::is_unserializable(result))
      (void)mlxrt::server::python_dumps(result, mlxrt::server::DumpOptions{.ensure_ascii = false});
  } catch (const mlxrt::server::py::Error&) {
  }
  return 0;
}
