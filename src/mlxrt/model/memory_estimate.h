#pragma once
/** What a run needs in memory (`mlxrt fit`, the server's admission): the weights (from the
 * safetensors headers), the KV cache of each layer as the family's make_cache builds it, the
 * largest transient of one prefill step, and the backend's headroom, against what the device has.
 *
 * The cache geometry is not a table: the model is bound lazily (no weight is read), one token is
 * run through the graph without evaluating it, and each layer's cache then tells its class, its
 * per-position bytes (KVCache, RotatingKVCache and its cap, QuantizedKVCache) or its constant
 * state (ArraysCache of recurrent layers). The bytes for N positions then follow from replaying,
 * in integers, how each cache class grows (256-position steps, the rotating buffer's
 * max_size + chunk - 1 during a prefill, maybe_quantize_kv_cache's conversion), so they equal the
 * cache arrays' nbytes after such a run. */
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/loader.h"

namespace mlxrt::model {

/** One layer's cache as the memory estimate sees it. */
struct LayerCacheGeometry {
  enum class Kind { kv, rotating, quantized, arrays } kind = Kind::kv;
  size_t bytes_per_position = 0;            // kv / rotating / quantized: bytes one position takes
  size_t quantized_bytes_per_position = 0;  // kv: the same position once --kv-bits quantizes it
  size_t state_bytes = 0;                   // arrays: the recurrent state, constant per sequence
  int max_size = 0, keep = 0;               // rotating
  int n_kv_heads = 0, k_head_dim = 0, v_head_dim = 0;
  std::string dtype;
};

/** The knobs of a run that change its memory (mlx-lm's generate flags). */
struct RunShape {
  int context = 4096;            // positions each sequence reaches (prompt + generated)
  std::optional<int> prompt;     // prompt tokens (prefilled in chunks); default: the whole context
  int batch = 1;
  std::optional<int> kv_bits;
  int kv_group_size = 64;
  int quantized_kv_start = 5000;
  std::optional<int> max_kv_size;
  int prefill_step_size = 2048;
};

/** Per-layer cache geometry plus the model dimensions the activation formula reads. */
struct ModelMemoryGeometry {
  std::vector<LayerCacheGeometry> layers;
  size_t weights_bytes = 0;
  int hidden_size = 0, n_heads = 0, intermediate_size = 0, vocab_size = 0;
  size_t act_itemsize = 2;  // bytes of one activation element (the cache dtype)
};

/** Geometry of `loaded` (bound lazily or not) for a run with `max_kv_size`. Builds the graph of a
 * one-token forward without evaluating it. UnsupportedError for a cache class it does not know. */
ModelMemoryGeometry memory_geometry(const LoadedModel& loaded, std::optional<int> max_kv_size);

/** KV bytes of one sequence, replaying the cache classes: `prompt` tokens prefilled as
 * generate_step does (chunks of prefill_step_size over all but the last, which runs alone), then
 * single steps up to `context` positions, maybe_quantize_kv_cache after each. */
struct KvBytes {
  size_t final_bytes = 0;  // the cache arrays' nbytes at the end
  size_t peak_bytes = 0;   // the largest moment, a growing layer's old buffer included
};
KvBytes sequence_kv_bytes(const ModelMemoryGeometry& g, const RunShape& run);

/** The device's memory: total, and what a run may use (CPU: MemAvailable; GPU: free memory or
 * MLX's memory limit). */
struct DeviceMemory {
  std::string device;  // "cpu" or "gpu"
  std::string name;
  size_t total_bytes = 0;
  size_t available_bytes = 0;
  std::string available_source;
};
DeviceMemory device_memory();

struct MemoryEstimate {
  ModelMemoryGeometry geometry;
  RunShape run;
  KvBytes kv;                     // batch included
  size_t activations_bytes = 0;   // the largest prefill-step transient, batch included
  nlohmann::ordered_json activation_terms;  // each term of the formula, in bytes
  size_t headroom_bytes = 0;
  size_t peak_bytes = 0;          // weights + kv.peak + activations: compare with MLX's peak memory
  size_t required_bytes = 0;      // peak + headroom
  DeviceMemory device;
  bool fits = false;
};

/** The whole estimate for `run`. UsageError for a bad run shape (context < 1, ...). */
MemoryEstimate estimate_memory(const ModelMemoryGeometry& geometry, const RunShape& run);

/** The estimate as JSON (`mlxrt fit --json`). */
nlohmann::ordered_json to_json(const MemoryEstimate& e);

/** Sum of the tensors' byte ranges of the model's weight files (headers only). */
size_t weights_bytes(const std::filesystem::path& dir);

}  // namespace mlxrt::model
