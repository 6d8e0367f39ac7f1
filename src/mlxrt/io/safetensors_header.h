#pragma once
/** The safetensors container header, parsed and validated before any tensor is trusted.
 * Independent of MLX so that it can be fuzzed on its own. */
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace mlxrt::io {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;               // safetensors spelling: "BF16", "F32", "U32", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;              // byte range inside the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t data_start = 0;         // file offset of the data section (8 + header length)
  std::vector<SafetensorsTensor> tensors;  // in header order
  std::map<std::string, std::string> metadata;
};

/** Byte size of one element of a safetensors dtype, or 0 when the dtype is unknown. */
size_t safetensors_dtype_size(std::string_view dtype);

/** Largest header we accept (the reference implementation's limit). */
inline constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

/** Validates `bytes` (the start of a file of `file_size` bytes, holding at least the whole header)
 * and returns the header. Checks: length prefix inside the file, JSON object, unique names, known
 * dtype, shape x dtype size equals the byte range, ranges inside the file, no overlap.
 * Throws WeightsError naming `source` and the tensor. */
SafetensorsHeader parse_safetensors_header(std::string_view bytes, uint64_t file_size,
                                           const std::string& source);

/** Reads and validates the header of a safetensors file. */
SafetensorsHeader read_safetensors_header(const std::filesystem::path& path);

}  // namespace mlxrt::io
