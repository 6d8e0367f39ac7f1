#pragma once
/** Prompt-cache files and trimming (save_prompt_cache / load_prompt_cache / can_trim_prompt_cache
 * / trim_prompt_cache of mlx_lm/models/cache.py). The file is mlx-lm's: a .safetensors file whose
 * tensors are the flattened per-layer `state` ("<layer>.<i>", quantized triples as
 * "<layer>.<i>.<j>"), with scalars stored as arrays, and whose metadata is the flattened
 * [user metadata, class names, scalar table] ("0.<key>", "1.<layer>", "2.<n>.0/1"). Files written
 * here load in mlx-lm and the other way round. */
#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include "mlxrt/cache/cache.h"

namespace mlxrt::cache {

/** The user metadata stored with a prompt cache (mlx_lm.cache_prompt writes "model" and
 * "tokenizer_config"). */
using PromptCacheMetadata = std::map<std::string, std::string>;

/** Writes `cache` (KVCache, RotatingKVCache, QuantizedKVCache layers) to `path` (written under a
 * temporary name, then renamed). mlx-lm appends ".safetensors" to a name without it; so does this. */
void save_prompt_cache(const std::filesystem::path& path, const CacheList& cache,
                       const PromptCacheMetadata& metadata = {});

/** Reads a prompt-cache file. A file that is not a prompt cache, names an unknown cache class,
 * or holds inconsistent state throws ConfigError naming the file and what was wrong. */
std::pair<CacheList, PromptCacheMetadata> load_prompt_cache(const std::filesystem::path& path);

/** mlx-lm's can_trim_prompt_cache: every layer is trimmable. */
bool can_trim_prompt_cache(const CacheList& cache);

/** mlx-lm's trim_prompt_cache: drops the last `num_tokens` positions of every layer when all
 * are trimmable; returns how many were dropped (0 when not trimmable or empty). */
int trim_prompt_cache(CacheList& cache, int num_tokens);

/** The mlx-lm class name of one layer cache ("KVCache", "RotatingKVCache", ...). */
std::string cache_class_name(const Cache& cache);

}  // namespace mlxrt::cache
