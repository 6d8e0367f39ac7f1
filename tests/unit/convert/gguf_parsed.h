#pragma once
// A GGUF file built in memory (gguf_builder.h) and parsed back, for the tests of the conversions
// that read tensors from it.
#include <cstdint>
#include <string>

#include "gguf_builder.h"
#include "mlxrt/convert/gguf_file.h"

namespace mlxrt::convert::testing {

struct ParsedGguf {
  std::string bytes;
  GgufFile file;
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(bytes.data()) + file.data_start; }
};

inline ParsedGguf parse_built(const GgufBuilder& b) {
  ParsedGguf p{b.build(), {}};
  p.file = parse_gguf(p.bytes, p.bytes.size(), "g.gguf");
  return p;
}

}  // namespace mlxrt::convert::testing
