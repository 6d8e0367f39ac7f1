// Arbitrary bytes as a whole GGUF file: the parser must accept or throw WeightsError, never
// crash, hang, over-allocate or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mlxrt/convert/gguf_file.h"
#include "mlxrt/util/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto file = mlxrt::convert::parse_gguf(bytes, size, "fuzz.gguf");
    for (const auto& t : file.tensors)  // validation promised these
      if (file.data_start + t.offset + t.n_bytes > size || t.dims.empty()) __builtin_trap();
    // Typed access on whatever the file holds must throw ConfigError, not crash.
    for (const auto& [key, value] : file.metadata) {
      try {
        (void)file.get_uint(key);
      } catch (const mlxrt::ConfigError&) {
      }
      try {
        (void)file.get_strings(key);
      } catch (const mlxrt::ConfigError&) {
      }
    }
  } catch (const mlxrt::WeightsError&) {
  }
  return 0;
}
