// Arbitrary bytes as a whole safetensors file: the parser must accept or throw WeightsError,
// never crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mlxrt/io/safetensors_header.h"
#include "mlxrt/util/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto header = mlxrt::io::parse_safetensors_header(bytes, size, "fuzz");
    for (const auto& t : header.tensors)
      if (t.end > size - header.data_start) __builtin_trap();  // validation promised this
  } catch (const mlxrt::WeightsError&) {
  }
  return 0;
}
