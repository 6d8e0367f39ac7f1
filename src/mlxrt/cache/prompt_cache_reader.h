#pragma once
/** Reading side of the prompt-cache file (load_prompt_cache in mlx_lm/models/cache.py): the
 * header validated first, then the class list, the scalar table and each layer's state, every
 * inconsistency a ConfigError naming the file and the entry. Internal to load_prompt_cache. */
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "mlxrt/cache/cache.h"
#include "mlxrt/cache/prompt_cache.h"

namespace mlxrt::cache {

class PromptCacheReader {
 public:
  explicit PromptCacheReader(const std::filesystem::path& path);

  int num_layers() const { return static_cast<int>(classes_.size()); }
  /** Layer i's cache, built from its class name and state (mlx-lm's from_state). */
  std::unique_ptr<Cache> layer(int i);
  /** ConfigError when a tensor belongs to no layer's state. */
  void check_all_used() const;
  const PromptCacheMetadata& user_metadata() const { return user_metadata_; }

 private:
  [[noreturn]] void fail(const std::string& what) const;
  std::unique_ptr<Cache> kv_cache(const std::string& p);
  std::unique_ptr<Cache> rotating_kv_cache(const std::string& p);
  std::unique_ptr<Cache> quantized_kv_cache(const std::string& p);
  std::unique_ptr<Cache> arrays_cache(const std::string& p);
  std::optional<mx::array> tensor_or_none(const std::string& key, int ndim);
  std::optional<QuantizedTensor> quantized_or_none(const std::string& key);
  int scalar(const std::string& key, int min_value);
  const mx::array& tensor(const std::string& key, int ndim);

  std::string source_;
  std::unordered_map<std::string, mx::array> arrays_;
  std::map<std::string, std::string> scalar_types_;  // tensor key -> "scalar" | "string" | "none"
  std::vector<std::string> classes_;
  PromptCacheMetadata user_metadata_;
  std::set<std::string> used_;
};

}  // namespace mlxrt::cache
