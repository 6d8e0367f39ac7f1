#pragma once
/** Speculative decoding with the model's own multi-token-prediction head (--mtp; Qwen3-Next and
 * Qwen3.5 checkpoints carry one: model/families/qwen3_next_mtp.h). mlx-lm has no MTP; the step
 * follows its speculative_generate_step (speculative.h) with the MTP head as the draft model:
 *
 *  - prefill: the main model over all but the last prompt token, and the MTP head over the same
 *    positions (entry j: token j + 1 with the main model's hidden state at j), into its own cache;
 *  - round: the MTP head drafts num_draft tokens (its first call takes every entry pending since
 *    the last round, with the main model's hidden states; each further call its own output hidden
 *    state and the token it drafted), the main model scores the last token and the drafts in one
 *    forward, and the drafts are accepted while they equal what the main model's sampler picks at
 *    the same row (mlx-lm's accept rule); the first disagreement, or the row after the last draft,
 *    gives one more token from the main model;
 *  - rollback: the main model's recurrent layers are left at the accepted prefix by a state-only
 *    replay of the window (CausalLM::keep_window), its KV caches trimmed; the MTP cache
 *    drops the entries its chained draft steps wrote, and the accepted positions are entered anew
 *    with the main model's hidden states in the next round.
 *
 * The first token comes from a round with no drafts (the last prompt token alone, as generate_step
 * processes it), since drafting needs that position's hidden state.
 *
 * A prompt cache (the server's) keeps an MTP run as the main model's layer caches followed by the
 * head's caches and one ArraysCache holding the main model's hidden state at the last cached
 * position: with the main caches at n positions, the head's hold entries 0..n-2 and that hidden
 * state pairs with the next token to make entry n-1. A later request continues from such a list
 * with drafting intact (the head's cache sees every earlier position). With the model loaded row-exact
 * (--spec-exact, the default for greedy --mtp) every emitted token and its logprobs are the bytes of
 * plain one-token-at-a-time decoding. Sampling uses the sampler for drafts and verification alike
 * (mlx-lm's order); logits processors and a quantized KV cache are refused. */
#include <optional>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/generate/generate_step.h"
#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/mtp.h"

namespace mlxrt::generate {

class MtpTokenGenerator {
 public:
  /** Prefills `prompt` into `cache` and the MTP head's cache. `cache` is null (fresh caches), the
   * main model's empty layer caches, or a prompt-cache list as described above (the prompt then
   * continues it). UsageError when the model was loaded without its MTP head, for bad options, or
   * for a filled cache without the head's part. */
  MtpTokenGenerator(model::CausalLM& model, const std::vector<int32_t>& prompt, GenerateOptions options,
                    int num_draft_tokens, model::CacheList* cache = nullptr);
  /** Waits for work still in flight. When the caller passed a cache, hands it back: after a round,
   * as a prompt-cache list (the head's pending entries entered up to the last cached position);
   * before any round, as the main model's fresh caches (nothing to keep). */
  ~MtpTokenGenerator();

  /** The next token (from_draft set for an accepted draft), or nullopt after max_tokens. */
  std::optional<GeneratedToken> next();

  /** The main model's layer caches: after a round, they hold the accepted tokens up to the last
   * one (which the next round processes). */
  model::CacheList& model_cache() { return main_cache_; }
  /** Tokens drafted and accepted so far. */
  int drafted() const { return drafted_; }
  int accepted() const { return accepted_; }

 private:
  struct Produced {
    int32_t token;
    mx::array logprobs;
    bool from_draft;
  };

  void take_cache(model::CacheList& outer);
  void hand_back();
  void prefill(const mx::array& prompt);
  std::pair<mx::array, mx::array> sample(const mx::array& logits) const;
  std::vector<mx::array> draft(int num_draft);
  void run_round();

  model::CausalLM& model_;
  model::MultiTokenPredictor* mtp_;
  GenerateOptions options_;
  int num_draft_tokens_;
  model::CacheList* outer_cache_;  // the caller's list: split into the two below, refilled on destruction
  model::CacheList main_cache_, mtp_cache_;
  // The main model's hidden state [1, 1, H] at the position before the prompt's first token, from a
  // prompt-cache list: its MTP entry still needs that token.
  std::optional<mx::array> carried_hidden_;
  mx::array y_;  // [1]: the last token, not yet through the main model
  // MTP entries not yet in its cache: tokens [n] and the main model's hidden states [1, n, H].
  std::optional<mx::array> pending_tokens_, pending_hidden_;
  int ntoks_ = 0, drafted_ = 0, accepted_ = 0;
  std::vector<Produced> round_;
  size_t handed_ = 0;
  bool done_ = false;
};

}  // namespace mlxrt::generate
