#pragma once
/** JSON text exactly as Python's json.dumps writes it (mlx_lm.server's bytes): ", " and ": "
 * separators, floats in repr() form (shortest round-trip, "1.0", "1e-05", "NaN", "Infinity"),
 * and with ensure_ascii every non-ASCII code point as \uXXXX (surrogate pairs above U+FFFF). */
#include <string>

#include <nlohmann/json.hpp>

namespace mlxrt::server {

struct DumpOptions {
  bool ensure_ascii = true;
};

std::string python_dumps(const nlohmann::ordered_json& value, DumpOptions options = {});

/** Python's repr(float) for a double. */
std::string python_float_repr(double value);

}  // namespace mlxrt::server
