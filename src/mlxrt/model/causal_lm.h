#pragma once
/** The interface every family's Model implements: tokens in, logits out, with a per-layer cache. */
#include <memory>
#include <string>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/cache/cache.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::kernels::cpu {
class CpuKernels;
}

namespace mlxrt::model {

namespace mx = mlx::core;

using CacheList = cache::CacheList;

class MultiTokenPredictor;  // mtp.h

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  /** inputs [B, L] int32 -> logits [B, L, vocab]. `cache` (one entry per layer) may be null for a
   * cache-free forward over the whole sequence. */
  virtual mx::array operator()(const mx::array& inputs, CacheList* cache) = 0;
  /** mlx-lm's make_prompt_cache(model): one fresh cache per layer (KVCache unless the family
   * says otherwise). */
  virtual CacheList make_cache() const = 0;
  /** True when the family's mlx-lm Model defines make_cache: make_prompt_cache then uses it and
   * ignores max_kv_size (llama.py does; qwen3.py does not). */
  virtual bool defines_make_cache() const { return false; }
  /** Per layer, the shape of what the layer stores in its cache (for checking a loaded prompt
   * cache); empty when the family does not say. */
  struct KvShape {
    int n_kv_heads, k_head_dim, v_head_dim;
  };
  virtual std::vector<KvShape> kv_shapes() const { return {}; }
  /** Per layer, the shapes (batch 1) of the arrays a recurrent layer keeps in its ArraysCache;
   * empty for layers without one (and for families that do not say). */
  virtual std::vector<std::vector<mx::Shape>> array_state_shapes() const { return {}; }
  virtual int vocab_size() const = 0;
  /** mlx-lm's model.model(inputs, cache): the hidden states the head reads (after the final norm),
   * [B, L, hidden]. The same graph operator() runs up to its head; for embeddings. */
  virtual mx::array hidden_states(const mx::array& inputs, CacheList* cache);
  /** True when the family implements hidden_states. */
  virtual bool has_hidden_states() const { return false; }
  /** Verify windows over caches that cannot be trimmed (recurrent layers), for speculative
   * decoding: open_window before a forward over `window` positions, then keep_window leaves every
   * layer's cache at the first `keep` of them (recurrent states replayed to that prefix, KV caches
   * trimmed). True where the family implements them (the hybrid qwen3_next / qwen3_5 models). */
  virtual bool supports_verify_window() const { return false; }
  virtual void open_window(CacheList& cache);
  virtual void keep_window(CacheList& cache, int window, int keep);
  /** The model's native multi-token-prediction head, when it was loaded with one
   * (LoadOptions::multi_token_prediction); null otherwise. */
  virtual MultiTokenPredictor* multi_token_predictor() { return nullptr; }

  /** The model's CPU kernels (null where MLX's own run: another device, MLXRT_CPU_KERNELS=mlx, a CPU
   * without ours): the generation steps compute their logsumexp on them (kernels/cpu/logsumexp.h,
   * MLX's bytes). */
  const std::shared_ptr<const kernels::cpu::CpuKernels>& cpu_kernels() const { return cpu_kernels_; }
  void set_cpu_kernels(std::shared_ptr<const kernels::cpu::CpuKernels> kernels) { cpu_kernels_ = std::move(kernels); }
  /** The CPU kernels of a model loaded at --fidelity l3 (null otherwise): the generation step
   * computes its log-probabilities on them (kernels/cpu/l3_fused.h's log_softmax). */
  const std::shared_ptr<const kernels::cpu::CpuKernels>& l3_kernels() const { return l3_kernels_; }
  void set_l3_kernels(std::shared_ptr<const kernels::cpu::CpuKernels> kernels) { l3_kernels_ = std::move(kernels); }

 private:
  std::shared_ptr<const kernels::cpu::CpuKernels> cpu_kernels_;
  std::shared_ptr<const kernels::cpu::CpuKernels> l3_kernels_;
};

inline mx::array CausalLM::hidden_states(const mx::array&, CacheList*) {
  throw UnsupportedError("this model family does not expose its hidden states (embeddings need them)");
}

inline void CausalLM::open_window(CacheList&) {
  throw UnsupportedError("this model family cannot roll its caches back to part of a verify window");
}

inline void CausalLM::keep_window(CacheList&, int, int) {
  throw UnsupportedError("this model family cannot roll its caches back to part of a verify window");
}

/** Token ids must index the model's embedding table: MLX's gather does not check its indices, so an
 * id past the table would read outside it. UsageError names the first bad id, its position and the
 * table's size (a tokenizer with more ids than the model has rows is the usual cause). */
inline void check_token_ids(const CausalLM& model, const std::vector<int32_t>& ids) {
  const int rows = model.vocab_size();
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= rows)
      throw UsageError("token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                       " is outside the model's embedding table of " + std::to_string(rows) +
                       " rows (does the tokenizer have ids the model lacks?)");
}

}  // namespace mlxrt::model
