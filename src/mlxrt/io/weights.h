#pragma once
/** Loading a checkpoint's safetensors lazily through MLX, after validating every header. */
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include <mlx/array.h>

namespace mlxrt::io {

namespace mx = mlx::core;

using WeightMap = std::unordered_map<std::string, mx::array>;

/** The weight files of a model directory as mlx-lm finds them (`model*.safetensors`), sorted.
 * When `model.safetensors.index.json` exists it is checked too: every file it names must exist
 * and hold the tensors it maps there. Throws WeightsError naming the file. */
std::vector<std::filesystem::path> find_weight_files(const std::filesystem::path& dir);

/** Validates each file's header, then loads all tensors lazily (nothing is read until used). */
WeightMap load_weights(const std::filesystem::path& dir);

}  // namespace mlxrt::io
