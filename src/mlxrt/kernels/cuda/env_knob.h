#pragma once
// The CUDA kernels' opt-ins and tuning knobs, read from the environment. Callers keep the value in
// a function-local static: these are asked on every layer of every step.
#include <cstdlib>
#include <initializer_list>
#include <string>

namespace mlxrt::kernels::cuda {

/** Whether the variable `name` is exactly "1" (an opt-in). */
inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string(v) == "1";
}

/** The variable `name` where it spells one of `allowed`, else `otherwise` (a tuning knob). */
inline int env_choice(const char* name, std::initializer_list<int> allowed, int otherwise) {
  const char* v = std::getenv(name);
  if (!v) return otherwise;
  for (int a : allowed)
    if (std::string(v) == std::to_string(a)) return a;
  return otherwise;
}

/** The variable `name` where it spells a positive integer (below 2^30), else 0 (a threshold knob:
 * unset or anything else leaves its path off). */
inline int env_positive_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end != v && *end == '\0' && n > 0 && n < (1L << 30) ? static_cast<int>(n) : 0;
}

}  // namespace mlxrt::kernels::cuda
