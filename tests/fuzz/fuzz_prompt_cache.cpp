// Arbitrary bytes as a prompt-cache file (mlx-lm's save_prompt_cache format: safetensors with the
// cache classes and scalars in the metadata). Reading must succeed or throw mlxrt::Error; a plain
// or rotating layer that was accepted must then take one more token (what generation does next)
// without any MLX error: the reader's checks are what stands between a bad file and MLX's graph.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <mlx/mlx.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/cache/prompt_cache_reader.h"
#include "mlxrt/cache/rotating_kv_cache.h"
#include "mlxrt/util/errors.h"

namespace fs = std::filesystem;
namespace mx = mlx::core;

namespace {

const fs::path& file() {
  static const fs::path path = [] {
    mx::set_default_device(mx::Device::cpu);
    return fs::temp_directory_path() / ("mlxrt-fuzz-prompt-cache-" + std::to_string(::getpid()) + ".safetensors");
  }();
  return path;
}

/** One more token through an accepted plain or rotating layer, shaped like its stored keys. */
void continue_one_token(mlxrt::cache::Cache& c) {
  std::optional<mlxrt::cache::PlainKV> kv;
  if (auto* p = dynamic_cast<mlxrt::cache::KVCache*>(&c)) kv = p->buffers();
  else if (auto* r = dynamic_cast<mlxrt::cache::RotatingKVCache*>(&c)) kv = r->buffers();
  if (!kv) return;
  const auto& k = kv->keys;
  const auto& v = kv->values;
  if (int64_t{k.shape(0)} * k.shape(1) * (k.shape(3) + v.shape(3)) > (1 << 16)) return;  // keep execs fast
  auto x = mx::zeros({k.shape(0), k.shape(1), 1, k.shape(3)}, k.dtype());
  auto y = mx::zeros({v.shape(0), v.shape(1), 1, v.shape(3)}, v.dtype());
  auto out = std::get<mlxrt::cache::PlainKV>(c.update_and_fetch(x, y));
  mx::eval(out.keys, out.values);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path& path = file();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), size);
  try {
    mlxrt::cache::PromptCacheReader reader(path);
    std::vector<std::unique_ptr<mlxrt::cache::Cache>> layers;
    for (int i = 0; i < reader.num_layers(); ++i) layers.push_back(reader.layer(i));
    reader.check_all_used();
    for (auto& layer : layers) continue_one_token(*layer);
  } catch (const mlxrt::Error&) {
  }
  return 0;
}
