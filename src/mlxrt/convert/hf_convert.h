#pragma once
/** `mlxrt convert --hf-path`: mlx_lm.convert in C++. A Hugging Face (or MLX) checkpoint of a family
 * mlxrt runs becomes an MLX checkpoint directory with the same bytes mlx_lm.convert writes: the
 * family's sanitize, the dtype cast, quantization (every q-mode, the mixed recipes, the models' own
 * 8-bit gates) or dequantization, the same shards, index, config.json and model card; the
 * tokenizer files are copied. Tensors are computed shard by shard from the memory-mapped input, so
 * a model larger than memory converts. */
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>

#include "mlxrt/convert/quant_recipes.h"

namespace mlxrt::convert {

struct HfConvertOptions {
  std::string hf_path;                           // a local directory or an HF cache id org/name[@rev]
  std::filesystem::path mlx_path = "mlx_model";  // must not exist
  bool quantize = false;
  QuantRequest quant;
  std::optional<std::string> dtype;  // float16 | bfloat16 | float32 (default: config's torch_dtype)
  bool dequantize = false;
  bool progress = true;              // per-tensor progress on stderr
  uint64_t max_shard_bytes = 5ull << 30;
};

struct HfConvertSummary {
  std::string model_type;
  uint64_t tensors = 0, bytes = 0;
  int shards = 0;
  int tokenizer_files = 0;
};

/** Converts, printing mlx_lm.convert's "[INFO] ..." lines to `info`. On any error nothing is left
 * at mlx_path. Errors name the flag, file or tensor and what was expected. */
HfConvertSummary convert_hf(const HfConvertOptions& options, std::ostream& info);

/** The dtypes --dtype accepts (mlx_lm.convert's MODEL_CONVERSION_DTYPES). */
bool is_conversion_dtype(const std::string& name);

}  // namespace mlxrt::convert
