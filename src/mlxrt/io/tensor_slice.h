#pragma once
/** Reading part of a tensor straight from its safetensors file: one rank's slice of a sharded
 * weight, without reading (or holding) the rest of it. */
#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>

#include <mlx/array.h>

namespace mlxrt::io {

namespace mx = mlx::core;

/** Where a tensor's bytes start in a weight file. */
struct TensorLocation {
  std::filesystem::path file;
  uint64_t offset = 0;  // absolute file offset of the first byte
};

using TensorLocations = std::unordered_map<std::string, TensorLocation>;

/** Every tensor of the model directory's weight files (find_weight_files), from their headers. */
TensorLocations tensor_locations(const std::filesystem::path& dir);

/** Elements [start, stop) along `axis` of the row-major tensor of `shape` and `dtype` stored at
 * `at`, read with one pread per contiguous run. WeightsError naming the file when it cannot be read. */
mx::array read_tensor_slice(const TensorLocation& at, const mx::Shape& shape, mx::Dtype dtype, int axis, int start,
                            int stop);

}  // namespace mlxrt::io
