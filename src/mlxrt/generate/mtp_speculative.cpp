// Speculative decoding with a model's multi-token-prediction head (mtp_speculative.h): mlxrt's own,
// shaped after speculative_generate_step in mlx_lm/generate.py (mlx-lm 0.32.2), which has no MTP.
#include "mlxrt/generate/mtp_speculative.h"

#include <algorithm>
#include <climits>
#include <string>

#include <mlx/memory.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/cache/arrays_cache.h"
#include "mlxrt/cache/prompt_cache.h"
#include "mlxrt/generate/speculative.h"
#include "mlxrt/kernels/cpu/logsumexp.h"
#include "mlxrt/model/make_prompt_cache.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::generate {

namespace {

/** x[:, start:stop] along axis 1. */
mx::array positions(const mx::array& x, int start, int stop) {
  mx::Shape lo(x.ndim(), 0), hi = x.shape();
  lo[1] = start;
  hi[1] = stop;
  return mx::slice(x, lo, hi);
}

std::vector<int32_t> to_ids(const mx::array& a) {
  auto ids = mx::astype(a, mx::int32);
  mx::eval(ids);
  return {ids.data<int32_t>(), ids.data<int32_t>() + ids.size()};
}

void eval_caches(const model::CacheList& a, const model::CacheList& b) {
  auto state = cache::state_arrays(a);
  auto more = cache::state_arrays(b);
  state.insert(state.end(), more.begin(), more.end());
  mx::eval(state);
}

}  // namespace

MtpTokenGenerator::MtpTokenGenerator(model::CausalLM& model, const std::vector<int32_t>& prompt,
                                     GenerateOptions options, int num_draft_tokens, model::CacheList* cache)
    : model_(model),
      mtp_(model.multi_token_predictor()),
      options_(std::move(options)),
      num_draft_tokens_(num_draft_tokens),
      outer_cache_(cache),
      y_(mx::array(0)) {
  if (!mtp_) throw UsageError("--mtp: the model was loaded without its multi-token-prediction head");
  if (prompt.empty()) throw UsageError("the prompt is empty: at least one token is needed");
  model::check_token_ids(model_, prompt);
  if (options_.prefill_step_size <= 0) throw UsageError("--prefill-step-size must be positive");
  if (options_.max_tokens == 0 || options_.max_tokens < -1)
    throw UsageError("max_tokens: must be -1 (no limit) or positive (got " + std::to_string(options_.max_tokens) + ")");
  if (num_draft_tokens_ < 1 || num_draft_tokens_ > kMaxDraftTokens)
    throw UsageError("--num-draft-tokens: must be between 1 and " + std::to_string(kMaxDraftTokens) + " (got " +
                     std::to_string(num_draft_tokens_) + ")");
  if (!options_.logits_processors.empty())
    throw UnsupportedError("--mtp does not run logits processors (repetition penalties, logit bias, grammars)");
  if (options_.kv_bits) throw UnsupportedError("--mtp cannot be combined with --kv-bits (a quantized KV cache)");
  if (!options_.sampler) options_.sampler = greedy_sample;
  mtp_cache_ = mtp_->make_mtp_cache();
  if (outer_cache_)
    take_cache(*outer_cache_);
  else
    main_cache_ = model::make_prompt_cache(model_);
  prefill(mx::astype(mx::array(prompt.data(), {static_cast<int>(prompt.size())}, mx::int32), mx::uint32));
}

MtpTokenGenerator::~MtpTokenGenerator() {
  try {
    mx::synchronize();
  } catch (...) {
    // A failed step has already been reported by whoever evaluated it.
  }
  if (!outer_cache_) return;
  try {
    hand_back();
  } catch (...) {
    // Keep nothing rather than a list whose parts disagree.
    *outer_cache_ = model::make_prompt_cache(model_);
  }
}

void MtpTokenGenerator::take_cache(model::CacheList& outer) {
  const size_t main_layers = model::make_prompt_cache(model_).size(), head_layers = mtp_cache_.size();
  const bool filled = std::any_of(outer.begin(), outer.end(), [](const auto& c) { return !c->empty(); });
  if (outer.size() == main_layers && !filled) {
    main_cache_ = std::move(outer);
    outer.clear();
    return;
  }
  const auto* held = outer.size() == main_layers + head_layers + 1
                         ? dynamic_cast<const cache::ArraysCache*>(outer.back().get())
                         : nullptr;
  if (!held || held->size() != 1 || !(*held)[0])
    throw UsageError("--mtp: the cache holds positions without the MTP head's part (its cache and the main model's "
                     "last hidden state), which the head needs to draft from them");
  const int positions_held = held->offset();
  if (outer.front()->offset() != positions_held || outer[main_layers]->offset() != positions_held - 1)
    throw UsageError("--mtp: the cache's MTP part does not match its main layers (" +
                     std::to_string(outer.front()->offset()) + " positions in the main model, " +
                     std::to_string(outer[main_layers]->offset()) + " in the head, hidden state of position " +
                     std::to_string(positions_held - 1) + ")");
  carried_hidden_ = *(*held)[0];
  main_cache_.clear();
  mtp_cache_.clear();
  for (size_t i = 0; i < outer.size() - 1; ++i) (i < main_layers ? main_cache_ : mtp_cache_).push_back(std::move(outer[i]));
  outer.clear();
}

void MtpTokenGenerator::hand_back() {
  auto& outer = *outer_cache_;
  outer.clear();
  if (!pending_tokens_) {
    // No round ran: the head's entries and the hidden state they need are not both at hand.
    outer = model::make_prompt_cache(model_);
    return;
  }
  // The pending entries but the last (its token is the one not yet through the main model) go into
  // the head's cache; the last one's hidden state is kept for the token that will follow.
  const int n = pending_hidden_->shape(1);
  if (n > 1)
    mtp_->predict(mx::expand_dims(mx::slice(*pending_tokens_, {0}, {n - 1}), 0), positions(*pending_hidden_, 0, n - 1),
                  &mtp_cache_);
  auto held = std::make_unique<cache::ArraysCache>(1);
  held->set_state({positions(*pending_hidden_, n - 1, n)}, main_cache_.front()->offset());
  eval_caches(main_cache_, mtp_cache_);
  mx::eval(held->state());
  for (auto* list : {&main_cache_, &mtp_cache_})
    for (auto& c : *list) outer.push_back(std::move(c));
  outer.push_back(std::move(held));
}

void MtpTokenGenerator::prefill(const mx::array& prompt) {
  const int total = static_cast<int>(prompt.size());
  auto tokens = mx::expand_dims(prompt, 0);  // [1, P]
  for (int start = 0; start < total - 1; start += options_.prefill_step_size) {
    const int stop = std::min(start + options_.prefill_step_size, total - 1);
    auto hidden = mtp_->forward_with_hidden(positions(tokens, start, stop), &main_cache_).first;
    if (carried_hidden_) {
      // Continuing a cached prompt: the entries run one position behind, from the carried hidden
      // state (the position before this chunk) paired with the chunk's first token.
      const int n = stop - start;
      mtp_->predict(positions(tokens, start, stop), mx::concatenate({*carried_hidden_, positions(hidden, 0, n - 1)}, 1),
                    &mtp_cache_);
      carried_hidden_ = positions(hidden, n - 1, n);
    } else {
      // MTP entries start..stop-1: the next prompt tokens with these positions' hidden states.
      mtp_->predict(positions(tokens, start + 1, stop + 1), hidden, &mtp_cache_);
    }
    eval_caches(main_cache_, mtp_cache_);
    mx::clear_cache();
  }
  if (carried_hidden_) {
    // The entry of the position before the last prompt token: the head's cache then holds as many
    // positions as the main model's, as after a fresh prefill.
    mtp_->predict(positions(tokens, total - 1, total), *carried_hidden_, &mtp_cache_);
    eval_caches(main_cache_, mtp_cache_);
    carried_hidden_.reset();
  }
  y_ = mx::slice(prompt, {total - 1}, {total});
}

std::pair<mx::array, mx::array> MtpTokenGenerator::sample(const mx::array& logits) const {
  auto logprobs = kernels::cpu::log_probs_last_axis(model_.cpu_kernels(), logits);
  return {options_.sampler(logprobs), logprobs};
}

std::vector<mx::array> MtpTokenGenerator::draft(int num_draft) {
  std::vector<mx::array> drafts;
  if (num_draft == 0) return drafts;
  // The pending entries (the main model's hidden states); the last row drafts the first token.
  auto [hidden, logits] = mtp_->predict(mx::expand_dims(*pending_tokens_, 0), *pending_hidden_, &mtp_cache_);
  for (int i = 0;; ++i) {
    const int last = hidden.shape(1) - 1;
    auto d = sample(mx::squeeze(positions(logits, last, last + 1), 1)).first;  // [1]
    mx::async_eval({d});
    drafts.push_back(d);
    if (i + 1 == num_draft) break;
    // A further step: the drafted token with the head's own hidden state, one position on.
    std::tie(hidden, logits) =
        mtp_->predict(mx::expand_dims(d, 0), positions(hidden, last, last + 1), &mtp_cache_);
  }
  return drafts;
}

void MtpTokenGenerator::run_round() {
  const int left = options_.max_tokens < 0 ? INT_MAX : options_.max_tokens - ntoks_;
  // The first round drafts nothing: drafting needs the last prompt position's hidden state.
  const int num_draft = pending_tokens_ ? std::min(left, num_draft_tokens_) : 0;
  auto drafts = draft(num_draft);
  std::vector<mx::array> window_tokens{y_};
  window_tokens.insert(window_tokens.end(), drafts.begin(), drafts.end());
  auto window = mx::concatenate(window_tokens);  // [num_draft + 1]
  model_.open_window(main_cache_);
  auto [hidden, logits] = mtp_->forward_with_hidden(mx::expand_dims(window, 0), &main_cache_);
  auto [tokens, logprobs] = sample(mx::squeeze(logits, 0));
  mx::eval({tokens, window});
  const auto main_ids = to_ids(tokens), window_ids = to_ids(window);

  round_.clear();
  handed_ = 0;
  int n = 0;
  auto row = [&](int i) { return mx::squeeze(mx::slice(logprobs, {i, 0}, {i + 1, logprobs.shape(1)}), 0); };
  while (n < num_draft && main_ids[n] == window_ids[n + 1]) {
    round_.push_back({main_ids[n], row(n), true});
    ++n;
    ++ntoks_;
    if (options_.max_tokens >= 0 && ntoks_ == options_.max_tokens) break;
  }
  const bool bonus = options_.max_tokens < 0 || ntoks_ < options_.max_tokens;
  if (bonus) {
    round_.push_back({main_ids[n], row(n), false});
    ++ntoks_;
  }
  drafted_ += num_draft;
  accepted_ += n;

  // Rollback: the main model keeps the last token and the accepted drafts; the MTP cache keeps the
  // entry its first call ended with (a main-model hidden state) and drops the chained ones.
  model_.keep_window(main_cache_, num_draft + 1, n + 1);
  if (num_draft > 1) cache::trim_prompt_cache(mtp_cache_, num_draft - 1);
  // Pending for the next round: entry i pairs the hidden state of window position i with the token
  // after it (the accepted drafts, then the main model's token).
  pending_tokens_ = mx::concatenate({mx::slice(window, {1}, {n + 1}), mx::array({static_cast<uint32_t>(main_ids[n])},
                                                                                mx::uint32)});
  pending_hidden_ = positions(hidden, 0, n + 1);
  y_ = mx::array({static_cast<uint32_t>(main_ids[n])}, mx::uint32);
}

std::optional<GeneratedToken> MtpTokenGenerator::next() {
  if (handed_ == round_.size()) {
    if (done_ || (options_.max_tokens >= 0 && ntoks_ >= options_.max_tokens)) {
      done_ = true;
      return std::nullopt;
    }
    run_round();
  }
  const auto& p = round_[handed_++];
  return GeneratedToken{p.token, p.logprobs, p.from_draft};
}

}  // namespace mlxrt::generate
