#pragma once
/** `mlxrt convert --gguf`: a GGUF model to a standard MLX checkpoint directory (config.json,
 * model*.safetensors with MLX affine weights/scales/biases, tokenizer.json,
 * tokenizer_config.json, generation_config.json) that mlx-lm and mlxrt load. Lossless: every
 * dequantised weight equals llama.cpp's dequantisation of the GGUF block it came from. */
#include <cstdint>
#include <filesystem>
#include <string>

namespace mlxrt::convert {

struct GgufConvertOptions {
  std::filesystem::path gguf;
  std::filesystem::path out;       // must not exist, or be an empty directory
  bool progress = true;            // progress on stderr
  bool tokenizer_only = false;     // write only the tokenizer files (any architecture)
  uint64_t max_shard_bytes = 5ull << 30;
};

struct GgufConvertSummary {
  std::string model_type;
  uint64_t tensors = 0;            // tensors written (weights, scales and biases counted apart)
  uint64_t bytes = 0;              // bytes of tensor data written
  int shards = 0;
  bool tokenizer = false;
};

/** Converts; on any error nothing is left at `out` (the work happens in a sibling directory that
 * is renamed into place at the end). Errors name the file and what was wrong. */
GgufConvertSummary convert_gguf(const GgufConvertOptions& options);

}  // namespace mlxrt::convert
