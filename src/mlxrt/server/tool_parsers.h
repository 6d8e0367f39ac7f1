#pragma once
/** The tool-call formats of mlx_lm/tool_parsers/ (mlx-lm 0.32.2): each module's markers
 * (tool_call_start, tool_call_end) and parse_tool_call, with the module's results for the same
 * text and tools. A parse that raises in Python throws py::Error here. */
#include <string>

#include "mlxrt/server/python_values.h"

namespace mlxrt::server::tool_parsers {

struct Format {
  const char* type;   // the module name (tokenizer_config's tool_parser_type)
  const char* start;  // tool_call_start
  const char* end;    // tool_call_end ("" for none)
  /** parse_tool_call(text, tools): one call {"name", "arguments"[, "id"]} or a list of them. */
  py::Json (*parse)(const std::u32string& text, const py::Json& tools);
};

/** The format of a module name, or nullptr for a name mlx-lm has no module for. */
const Format* find_format(const std::string& type);

}  // namespace mlxrt::server::tool_parsers
