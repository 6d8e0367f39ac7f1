// Port of speculative_generate_step in mlx_lm/generate.py (mlx-lm 0.32.2).
//
// mlx-lm writes it as a Python generator whose loop yields inside each round; here a round runs
// when the tokens of the previous one have all been handed out, and the code after the yields
// (next inputs, history trim, cache rewind) runs at the start of the following round, so the caches
// stand where mlx-lm's do whenever the caller stops pulling.
#include "mlxrt/generate/speculative.h"

#include <algorithm>
#include <set>
#include <string>

#include <mlx/memory.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/cache/prompt_cache.h"
#include "mlxrt/cache/quantized_kv_cache.h"
#include "mlxrt/kernels/cpu/logsumexp.h"
#include "mlxrt/model/make_prompt_cache.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::generate {

namespace {

int size_of(const mx::array& a) { return static_cast<int>(a.size()); }

/** a[:stop] with Python's slice rules (a negative stop counts from the end; clamped). */
mx::array head(const mx::array& a, int stop) {
  const int n = size_of(a);
  if (stop < 0) stop += n;
  stop = std::clamp(stop, 0, n);
  return mx::slice(a, {0}, {stop});
}

mx::array tail(const mx::array& a, int start) { return mx::slice(a, {start}, {size_of(a)}); }

/** rows[i] of a [rows, vocab] array, as [vocab]. */
mx::array row(const mx::array& a, int i) {
  return mx::squeeze(mx::slice(a, {i, 0}, {i + 1, a.shape(1)}), 0);
}

mx::array token_array(int32_t token) { return mx::array({static_cast<uint32_t>(token)}, mx::uint32); }

std::vector<int32_t> to_ids(const mx::array& a) {
  auto ids = mx::astype(a, mx::int32);
  mx::eval(ids);
  return {ids.data<int32_t>(), ids.data<int32_t>() + ids.size()};
}

/** mlx-lm's "Speculative decoding requires a trimmable prompt cache (got {...})." with the classes
 * that cannot trim, as a Python set of names prints (sorted here: a set's order is arbitrary). */
void check_trimmable(const model::CacheList& cache) {
  if (cache::can_trim_prompt_cache(cache)) return;
  std::set<std::string> types;
  for (const auto& c : cache)
    if (!c->is_trimmable()) types.insert(cache::cache_class_name(*c));
  std::string names;
  for (const auto& t : types) names += (names.empty() ? "'" : ", '") + t + "'";
  throw UnsupportedError("Speculative decoding requires a trimmable prompt cache (got {" + names +
                         "}): the main model's cache must support trimming rejected draft tokens");
}

}  // namespace

void check_speculative_cache(const model::CausalLM& model, bool windows) {
  if (windows && model.supports_verify_window()) return;
  check_trimmable(model::make_prompt_cache(model));
}

SpeculativeTokenGenerator::SpeculativeTokenGenerator(model::CausalLM& model, model::CausalLM& draft_model,
                                                     const std::vector<int32_t>& prompt_ids, GenerateOptions options,
                                                     int num_draft_tokens, model::CacheList* cache)
    : model_(model),
      draft_(draft_model),
      options_(std::move(options)),
      num_draft_tokens_(num_draft_tokens),
      outer_cache_(cache),
      y_(mx::array(0)),
      draft_y_(mx::array(0)) {
  if (prompt_ids.empty()) throw UsageError("the prompt is empty: at least one token is needed");
  model::check_token_ids(model_, prompt_ids);
  model::check_token_ids(draft_, prompt_ids);
  if (options_.prefill_step_size <= 0) throw UsageError("--prefill-step-size must be positive");
  if (options_.max_tokens < 1)
    throw UsageError("max_tokens: speculative decoding needs a positive limit (got " +
                     std::to_string(options_.max_tokens) + ")");
  if (num_draft_tokens_ < 0 || num_draft_tokens_ > kMaxDraftTokens)
    throw UsageError("num_draft_tokens: must be between 0 and " + std::to_string(kMaxDraftTokens) + " (got " +
                     std::to_string(num_draft_tokens_) + ")");
  if (draft_.vocab_size() > model_.vocab_size())
    throw UsageError("the draft model's vocabulary (" + std::to_string(draft_.vocab_size()) +
                     " logits) is larger than the main model's embedding table (" +
                     std::to_string(model_.vocab_size()) + " rows): its tokens could not be verified");
  if (!options_.sampler) options_.sampler = greedy_sample;
  cache::validate_kv_quantization(options_.kv_bits, options_.kv_group_size, options_.quantized_kv_start);
  if (cache) {
    // mlx-lm's prompt_cache[:len(model.layers)] and prompt_cache[len(model.layers):].
    const size_t layers = model_.make_cache().size();
    if (cache->size() <= layers)
      throw UsageError("a speculative prompt cache holds the main model's " + std::to_string(layers) +
                       " layer caches followed by the draft model's; this one has " +
                       std::to_string(cache->size()));
    for (size_t i = 0; i < cache->size(); ++i) (i < layers ? model_cache_ : draft_cache_).push_back(std::move((*cache)[i]));
    cache->clear();
  } else {
    model_cache_ = model::make_prompt_cache(model_);
    draft_cache_ = model::make_prompt_cache(draft_);
  }
  // Caches that cannot be trimmed (recurrent layers) are rolled back by verify windows where the
  // model has them (ours: mlx-lm refuses them, and so does the CLI unless --spec-exact).
  main_windows_ = !cache::can_trim_prompt_cache(model_cache_) && model_.supports_verify_window();
  draft_windows_ = !cache::can_trim_prompt_cache(draft_cache_) && draft_.supports_verify_window();
  if (!main_windows_) check_trimmable(model_cache_);

  mx::array y = mx::astype(mx::array(prompt_ids.data(), {static_cast<int>(prompt_ids.size())}, mx::int32), mx::uint32);
  draft_y_ = y;
  prefill(draft_, draft_cache_, draft_y_);
  y_ = y;
  prefill(model_, model_cache_, y_);
}

SpeculativeTokenGenerator::~SpeculativeTokenGenerator() {
  try {
    if (round_open_) rewind(num_draft_, accepted_);
    mx::synchronize();
  } catch (...) {
    // A failed step has already been reported by whoever evaluated it.
  }
  if (outer_cache_) {
    for (auto& c : model_cache_) outer_cache_->push_back(std::move(c));
    for (auto& c : draft_cache_) outer_cache_->push_back(std::move(c));
  }
}

void SpeculativeTokenGenerator::quantize_cache(model::CacheList& cache) {
  cache::maybe_quantize_kv_cache(cache, options_.kv_bits, options_.kv_group_size, options_.quantized_kv_start);
}

void SpeculativeTokenGenerator::prefill(model::CausalLM& model, model::CacheList& cache, mx::array& y) {
  while (size_of(y) > 1) {
    const int n = std::min(options_.prefill_step_size, size_of(y) - 1);
    model(mx::expand_dims(head(y, n), 0), &cache);
    quantize_cache(cache);
    mx::eval(cache::state_arrays(cache));
    y = tail(y, n);
    mx::clear_cache();
  }
}

std::pair<mx::array, mx::array> SpeculativeTokenGenerator::process_and_sample(const std::optional<mx::array>& tokens,
                                                                              mx::array logits) {
  for (const auto& processor : options_.logits_processors) logits = processor(*tokens, logits);
  auto logprobs = kernels::cpu::log_probs_last_axis(model_.cpu_kernels(), logits);
  auto y = options_.sampler(logprobs);
  return {y, logprobs};
}

std::pair<mx::array, mx::array> SpeculativeTokenGenerator::step(model::CausalLM& model, model::CacheList& cache,
                                                                mx::array y, int n_predict) {
  auto logits = model(mx::expand_dims(y, 0), &cache);
  // logits[:, -n_predict:, :]
  const int L = logits.shape(1), V = logits.shape(2);
  logits = mx::slice(logits, {0, L - n_predict, 0}, {logits.shape(0), L, V});
  quantize_cache(cache);
  if (options_.logits_processors.empty()) return process_and_sample(std::nullopt, mx::squeeze(logits, 0));
  // Each row is processed and sampled on its own, the history growing by what was sampled.
  std::vector<mx::array> out_y, out_logprobs;
  if (n_predict > 1) y = head(y, -(n_predict - 1));
  for (int i = 0; i < n_predict; ++i) {
    prev_tokens_ = prev_tokens_ ? mx::concatenate({*prev_tokens_, y}) : y;
    auto rows = mx::squeeze(mx::slice(logits, {0, i, 0}, {logits.shape(0), i + 1, V}), 1);
    auto [sampled, logprobs] = process_and_sample(prev_tokens_, rows);
    y = sampled;
    out_y.push_back(sampled);
    out_logprobs.push_back(logprobs);
  }
  return {mx::concatenate(out_y, 0), mx::concatenate(out_logprobs, 0)};
}

mx::array SpeculativeTokenGenerator::draft_generate(mx::array y, int num_draft) {
  if (num_draft == 0) return mx::zeros({0}, mx::uint32);
  std::vector<mx::array> ys;
  for (int i = 0; i < num_draft; ++i) {
    y = step(draft_, draft_cache_, y, 1).first;
    mx::async_eval({y});
    ys.push_back(y);
  }
  return mx::concatenate(ys);
}

void SpeculativeTokenGenerator::rewind(int num_draft, int num_accept) {
  if (main_windows_) {
    model_.keep_window(model_cache_, num_draft + 1, num_accept + 1);
  } else {
    cache::trim_prompt_cache(model_cache_, num_draft - num_accept);
  }
  const int drop = std::max(num_draft - num_accept - 1, 0);
  if (draft_windows_) {
    draft_.keep_window(draft_cache_, draft_window_, draft_window_ - drop);
  } else {
    cache::trim_prompt_cache(draft_cache_, drop);
  }
}

void SpeculativeTokenGenerator::check_for_draft(int32_t token) const {
  // The main model samples over its own vocabulary; its token is the draft model's next input.
  if (token >= draft_.vocab_size())
    throw UsageError("the main model produced token " + std::to_string(token) +
                     ", which is outside the draft model's embedding table (" + std::to_string(draft_.vocab_size()) +
                     " rows): use a draft model with the main model's vocabulary");
}

void SpeculativeTokenGenerator::run_round() {
  num_draft_ = std::min(options_.max_tokens - ntoks_, num_draft_tokens_);
  drafted_ += num_draft_;
  if (draft_windows_) {
    // The draft model takes draft_y_, then each draft but the last.
    draft_window_ = num_draft_ == 0 ? 0 : size_of(draft_y_) + num_draft_ - 1;
    draft_.open_window(draft_cache_);
  }
  auto draft_tokens = draft_generate(draft_y_, num_draft_);
  if (prev_tokens_) prev_tokens_ = head(*prev_tokens_, size_of(*prev_tokens_) - size_of(y_) - num_draft_ + 1);
  y_ = mx::concatenate({y_, draft_tokens});
  if (main_windows_) model_.open_window(model_cache_);
  auto [tokens, logprobs] = step(model_, model_cache_, y_, num_draft_ + 1);
  mx::eval({tokens, draft_tokens});
  draft_tokens_ = to_ids(draft_tokens);
  tokens_ = to_ids(tokens);
  round_.clear();
  handed_ = 0;
  int n = 0;
  while (n < num_draft_) {
    if (tokens_[n] != draft_tokens_[n]) break;
    round_.push_back({tokens_[n], row(logprobs, n), true, n + 1});
    ++n;
    ++ntoks_;
    if (ntoks_ == options_.max_tokens) break;
  }
  if (ntoks_ < options_.max_tokens) {
    ++ntoks_;
    round_.push_back({tokens_[n], row(logprobs, n), false, n});
  }
  round_open_ = true;
}

void SpeculativeTokenGenerator::end_round() {
  const int n = accepted_;
  check_for_draft(tokens_[n]);
  y_ = token_array(tokens_[n]);
  draft_y_ = y_;
  // Every draft accepted: the last one has not been through the draft model yet.
  if (n == num_draft_ && n > 0) draft_y_ = mx::concatenate({token_array(draft_tokens_.back()), draft_y_});
  if (prev_tokens_) prev_tokens_ = head(*prev_tokens_, -std::max(num_draft_ - n, 1));
  rewind(num_draft_, n);
  round_open_ = false;
}

std::optional<GeneratedToken> SpeculativeTokenGenerator::next() {
  if (done_) return std::nullopt;
  if (handed_ == round_.size()) {
    if (round_open_) {
      if (ntoks_ == options_.max_tokens) {
        // mlx-lm's `finally`: the last round's rewind.
        done_ = true;
        rewind(num_draft_, accepted_);
        round_open_ = false;
        return std::nullopt;
      }
      end_round();
    }
    run_round();
  }
  const auto& p = round_[handed_++];
  accepted_ = p.accepted;
  return GeneratedToken{p.token, p.logprobs, p.from_draft};
}

}  // namespace mlxrt::generate
