// Port of save_prompt_cache, load_prompt_cache, can_trim_prompt_cache and trim_prompt_cache
// (mlx_lm/models/cache.py, mlx-lm 0.32.2). mlx-lm flattens [c.state for c in cache] with
// tree_flatten; the layouts below are those flattened keys, class by class.
#include "mlxrt/cache/prompt_cache.h"

#include <filesystem>
#include <string>
#include <unordered_map>

#include <mlx/io.h>
#include <mlx/ops.h>

#include "mlxrt/cache/arrays_cache.h"
#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/cache/prompt_cache_reader.h"
#include "mlxrt/cache/quantized_kv_cache.h"
#include "mlxrt/cache/rotating_kv_cache.h"
#include "mlxrt/util/durable_file.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cache {

namespace {

// Collects tensors and the scalar table the way save_prompt_cache's map_data does.
class StateWriter {
 public:
  void array(const std::string& key, const mx::array& a) { arrays_.insert_or_assign(key, a); }
  void scalar(const std::string& key, int v) {
    arrays_.insert_or_assign(key, mx::array(v));
    table(key, "scalar");
  }
  void none(const std::string& key) {
    arrays_.insert_or_assign(key, mx::zeros({0}, mx::float32));  // mx.array([])
    table(key, "none");
  }
  void optional(const std::string& key, const std::optional<mx::array>& a) {
    if (a) {
      array(key, *a);
    } else {
      none(key);
    }
  }
  void quantized(const std::string& key, const std::optional<QuantizedTensor>& t) {
    if (!t) return none(key);
    array(key + ".0", t->packed);
    array(key + ".1", t->scales);
    array(key + ".2", t->biases);
  }
  std::unordered_map<std::string, mx::array>& arrays() { return arrays_; }
  std::unordered_map<std::string, std::string>& metadata() { return metadata_; }

 private:
  void table(const std::string& key, const char* type) {
    // scalars = [""] first, so entries start at 1.
    const std::string n = "2." + std::to_string(++n_scalars_);
    metadata_[n + ".0"] = key;
    metadata_[n + ".1"] = type;
  }
  std::unordered_map<std::string, mx::array> arrays_;
  std::unordered_map<std::string, std::string> metadata_;
  int n_scalars_ = 0;
};

void write_layer(StateWriter& w, const std::string& p, const Cache& c) {
  if (const auto* kv = dynamic_cast<const KVCache*>(&c)) {
    auto b = kv->buffers();
    w.optional(p + ".0", b ? std::optional(b->keys) : std::nullopt);
    w.optional(p + ".1", b ? std::optional(b->values) : std::nullopt);
    w.scalar(p + ".2", kv->offset());
  } else if (const auto* r = dynamic_cast<const RotatingKVCache*>(&c)) {
    auto b = r->buffers();
    w.optional(p + ".0", b ? std::optional(b->keys) : std::nullopt);
    w.optional(p + ".1", b ? std::optional(b->values) : std::nullopt);
    w.scalar(p + ".2", r->offset());
    w.scalar(p + ".3", r->keep());
    w.scalar(p + ".4", r->max_size());
    w.scalar(p + ".5", r->idx());
  } else if (const auto* q = dynamic_cast<const QuantizedKVCache*>(&c)) {
    auto b = q->buffers();
    w.quantized(p + ".0", b ? std::optional(b->keys) : std::nullopt);
    w.quantized(p + ".1", b ? std::optional(b->values) : std::nullopt);
    w.scalar(p + ".2", q->offset());
    w.scalar(p + ".3", q->group_size());
    w.scalar(p + ".4", q->bits());
  } else if (const auto* a = dynamic_cast<const ArraysCache*>(&c)) {
    // state = (cache, left_padding, lengths): the slots, then two Nones in a single-sequence run.
    for (int j = 0; j < a->size(); ++j) w.optional(p + ".0." + std::to_string(j), (*a)[j]);
    w.none(p + ".1");
    w.none(p + ".2");
  } else {
    throw UnsupportedError("save_prompt_cache: layer " + p + " holds a cache of a kind that cannot be saved");
  }
}

std::filesystem::path with_safetensors_suffix(const std::filesystem::path& path) {
  if (path.extension() == ".safetensors") return path;
  return std::filesystem::path(path.string() + ".safetensors");
}

}  // namespace

std::string cache_class_name(const Cache& c) {
  if (dynamic_cast<const KVCache*>(&c)) return "KVCache";
  if (dynamic_cast<const RotatingKVCache*>(&c)) return "RotatingKVCache";
  if (dynamic_cast<const QuantizedKVCache*>(&c)) return "QuantizedKVCache";
  if (dynamic_cast<const ArraysCache*>(&c)) return "ArraysCache";
  return "unknown";
}

void save_prompt_cache(const std::filesystem::path& path, const CacheList& cache,
                       const PromptCacheMetadata& metadata) {
  StateWriter w;
  for (size_t i = 0; i < cache.size(); ++i) write_layer(w, std::to_string(i), *cache[i]);
  auto& meta = w.metadata();
  for (const auto& [key, value] : metadata) meta["0." + key] = value;
  for (size_t i = 0; i < cache.size(); ++i) meta["1." + std::to_string(i)] = cache_class_name(*cache[i]);
  meta["2.0"] = "";
  // Written under ".NAME.partial-PID.safetensors" next to the target, synced, renamed into place and
  // the directory synced: a reader never sees a half-written file, and a crash keeps the old one.
  const auto target = with_safetensors_suffix(path);
  const auto partial = util::partial_path(target, ".safetensors");
  util::remove_stale_partials(partial.parent_path());
  try {
    mx::save_safetensors(partial.string(), w.arrays(), meta);
    util::durable_rename(partial, target);
  } catch (const std::exception& e) {
    std::error_code ec;
    std::filesystem::remove(partial, ec);
    throw ConfigError(target.string() + ": cannot write the prompt-cache file (" + e.what() + ")");
  }
}

std::pair<CacheList, PromptCacheMetadata> load_prompt_cache(const std::filesystem::path& path) {
  PromptCacheReader reader(path);
  CacheList cache;
  for (int i = 0; i < reader.num_layers(); ++i) cache.push_back(reader.layer(i));
  reader.check_all_used();
  // An ArraysCache stores no position count; it stands for as many positions as the KV layers.
  int positions = 0;
  for (const auto& c : cache)
    if (!dynamic_cast<const ArraysCache*>(c.get())) {
      positions = c->offset();
      break;
    }
  for (auto& c : cache)
    if (auto* a = dynamic_cast<ArraysCache*>(c.get())) a->set_state(a->slots(), positions);
  return {std::move(cache), reader.user_metadata()};
}

bool can_trim_prompt_cache(const CacheList& cache) {
  for (const auto& c : cache)
    if (!c->is_trimmable()) return false;
  return true;
}

int trim_prompt_cache(CacheList& cache, int num_tokens) {
  if (!can_trim_prompt_cache(cache) || cache.empty()) return 0;
  int trimmed = 0;
  for (size_t i = 0; i < cache.size(); ++i) {
    const int n = cache[i]->trim(num_tokens);
    if (i == 0) trimmed = n;
  }
  return trimmed;
}

}  // namespace mlxrt::cache
