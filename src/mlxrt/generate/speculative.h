#pragma once
/** mlx-lm's speculative_generate_step (mlx_lm/generate.py): a draft model proposes up to
 * `num_draft_tokens` tokens one at a time, the main model scores the last accepted token and the
 * drafts in one call, and the drafts are accepted while they equal what the main model's sampler
 * picks at the same row; the first disagreement (or the row after the last draft) gives one more
 * token from the main model. Both caches are then trimmed back to the accepted tokens.
 *
 * Sampling draws from the PRNG in mlx-lm's order: each draft step samples one [1, vocab] row,
 * then the verify step samples all num_draft + 1 rows in one call (one draw for the batch). */
#include <optional>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/generate/generate_step.h"
#include "mlxrt/model/causal_lm.h"

namespace mlxrt::generate {

/** The most tokens one step may draft (--num-draft-tokens / num_draft_tokens; 0 drafts nothing, and
 * every token comes from the main model, as in mlx-lm). */
inline constexpr int kMaxDraftTokens = 64;

/** UnsupportedError with mlx-lm's message when `model`'s fresh cache cannot be trimmed (recurrent
 * layers), which speculative decoding needs to drop rejected drafts; with `windows` (ours: the CLI
 * passes --spec-exact) a model that rolls back verify windows (CausalLM::keep_window) passes too. */
void check_speculative_cache(const model::CausalLM& model, bool windows = false);

class SpeculativeTokenGenerator {
 public:
  /** Prefills all but the last prompt token into the draft's cache, then the main model's.
   * `options.max_kv_size` and `options.prompt_progress` are not used (mlx-lm drops them for
   * speculative decoding); `options.max_tokens` must be positive. `cache` (null: fresh caches) holds
   * the main model's layer caches followed by the draft's, as mlx-lm's prompt_cache argument does.
   * UnsupportedError when the main model's cache cannot be trimmed (mlx-lm's message). */
  SpeculativeTokenGenerator(model::CausalLM& model, model::CausalLM& draft_model, const std::vector<int32_t>& prompt,
                            GenerateOptions options, int num_draft_tokens, model::CacheList* cache = nullptr);
  /** Rewinds the caches past the tokens of the current round that were never handed out (mlx-lm's
   * `finally`), then waits for work still in flight. */
  ~SpeculativeTokenGenerator();

  /** The next token (from_draft set for an accepted draft), or nullopt after max_tokens. */
  std::optional<GeneratedToken> next();

  /** The main model's layer caches. */
  model::CacheList& model_cache() { return model_cache_; }
  /** Tokens drafted so far (the accepted ones come out with from_draft set). */
  int drafted() const { return drafted_; }

 private:
  struct Produced {
    int32_t token;
    mx::array logprobs;
    bool from_draft;
    int accepted;  // the round's accepted count once this token is handed out
  };

  void prefill(model::CausalLM& model, model::CacheList& cache, mx::array& y);
  /** `_step`: the model over `y`, the last `n_predict` rows processed and sampled. */
  std::pair<mx::array, mx::array> step(model::CausalLM& model, model::CacheList& cache, mx::array y, int n_predict);
  std::pair<mx::array, mx::array> process_and_sample(const std::optional<mx::array>& tokens, mx::array logits);
  mx::array draft_generate(mx::array y, int num_draft);
  void quantize_cache(model::CacheList& cache);
  void rewind(int num_draft, int num_accept);
  void run_round();
  void end_round();
  void check_for_draft(int32_t token) const;

  model::CausalLM& model_;
  model::CausalLM& draft_;
  GenerateOptions options_;
  int num_draft_tokens_;
  model::CacheList* outer_cache_;  // the caller's list: split into the two below, refilled on destruction
  model::CacheList model_cache_, draft_cache_;
  std::optional<mx::array> prev_tokens_;         // history for the logits processors
  mx::array y_, draft_y_;
  int ntoks_ = 0, num_draft_ = 0, accepted_ = 0, drafted_ = 0;
  std::vector<Produced> round_;
  size_t handed_ = 0;
  bool round_open_ = false;  // tokens of the current round may still be handed out
  bool done_ = false;
  std::vector<int32_t> draft_tokens_, tokens_;
  // Caches rolled back by verify windows (CausalLM::keep_window) instead of trimmed; the draft's
  // window is the positions it took this round.
  bool main_windows_ = false, draft_windows_ = false;
  int draft_window_ = 0;
};

}  // namespace mlxrt::generate
