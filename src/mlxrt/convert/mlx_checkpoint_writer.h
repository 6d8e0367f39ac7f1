#pragma once
/** Reading a source checkpoint's config and writing an MLX checkpoint directory exactly as
 * mlx-lm's load_config and save do (mlx_lm/utils.py, mlx-lm 0.32.2): the shared end of `convert`
 * and `fuse`. */
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "mlxrt/convert/mlx_parameters.h"

namespace mlxrt::convert {

/** config.json as load_config and load_model leave it (key order kept): generation_config.json's
 * eos_token_id when it has a true one, a text_config's quantization_config moved up, the legacy
 * mxfp4 / mxfp8 quant methods as a quantization section. ConfigError naming the file. */
nlohmann::ordered_json load_source_config(const std::filesystem::path& dir);

struct SavedCheckpoint {
  uint64_t tensors = 0, bytes = 0;
  int shards = 0;
  int tokenizer_files = 0;
};

/** mlx-lm's save into `dir`: save_model (shards of at most max_shard_bytes in parameter order,
 * each tensor computed as its shard is written and dropped after it, so that one shard is
 * resident at a time; the index), save_config (no _name_or_path or
 * vision_config, the quantization section mirrored, top-level keys sorted, json.dump indent 4),
 * the tokenizer's files, *.py and generation_config.json copied from `source`, and the model card
 * (`repo` as its base_model when the source was named by a repo id). */
SavedCheckpoint save_mlx_checkpoint(const std::filesystem::path& dir, MlxParameters params,
                                    nlohmann::ordered_json config, const std::filesystem::path& source,
                                    const std::optional<std::string>& repo, uint64_t max_shard_bytes, bool progress);

}  // namespace mlxrt::convert
