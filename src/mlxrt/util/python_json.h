#pragma once
/** JSON text exactly as Python's json.dumps writes it (mlx_lm.server's bytes): ", " and ": "
 * separators, floats in repr() form (shortest round-trip, "1.0", "1e-05", "NaN", "Infinity"),
 * and with ensure_ascii every non-ASCII code point as \uXXXX (surrogate pairs above U+FFFF). */
#include <string>

#include <nlohmann/json.hpp>

namespace mlxrt::util {

struct DumpOptions {
  bool ensure_ascii = true;
  /** json.dumps(indent=N): each item on its own line indented N spaces per level, "," ending a
   * line (no trailing space); empty containers stay "[]" / "{}". Negative: one line. */
  int indent = -1;
};

std::string python_dumps(const nlohmann::ordered_json& value, DumpOptions options = {});

/** Python's repr(float) for a double. */
std::string python_float_repr(double value);

}  // namespace mlxrt::util
