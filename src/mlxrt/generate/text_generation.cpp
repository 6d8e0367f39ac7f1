// Port of stream_generate in mlx_lm/generate.py (mlx-lm 0.32.2), plus the token-level stop
// sequences of mlx_lm/server.py.
#include "mlxrt/generate/text_generation.h"

#include <algorithm>

#include <mlx/memory.h>

#include "mlxrt/generate/mtp_speculative.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::generate {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

const char* to_string(FinishReason reason) { return reason == FinishReason::stop ? "stop" : "length"; }

std::vector<int32_t> encode_prompt(const tokenizer::Tokenizer& tokenizer, std::string_view text) {
  const auto& bos = tokenizer.config().bos_token;
  bool add_special = !bos || !text.starts_with(*bos);
  return tokenizer.encode(text, add_special);
}

struct TextGenerator::State {
  State(model::CausalLM& model, tokenizer::Tokenizer tok, std::vector<int32_t> prompt_ids,
        TextGenerationOptions opts, model::CacheList* cache)
      : tokenizer(std::move(tok)),
        options(std::move(opts)),
        detokenizer(tokenizer.streaming_detokenizer()),
        eos(options.eos_token_ids ? *options.eos_token_ids : tokenizer.eos_token_ids()),
        stop(make_stop_sequences(tokenizer, eos, options.stop_words)),
        matcher(stop.matcher()),
        prompt_tokens(static_cast<int>(prompt_ids.size())),
        tic(Clock::now()) {
    // Prefill runs here, after the rest is set up.
    const auto& step_options = static_cast<const GenerateOptions&>(options);
    if (options.draft_model && options.mtp) throw UsageError("--mtp and --draft-model: choose one drafter");
    if (options.draft_model)
      speculative.emplace(model, *options.draft_model, prompt_ids, step_options, options.num_draft_tokens, cache);
    else if (options.mtp)
      mtp.emplace(model, prompt_ids, step_options, options.num_draft_tokens, cache);
    else
      plain.emplace(model, prompt_ids, step_options, cache);
  }

  std::optional<GeneratedToken> next_token() {
    return plain ? plain->next() : mtp ? mtp->next() : speculative->next();
  }

  bool is_eos(int32_t t) const { return std::find(eos.begin(), eos.end(), t) != eos.end(); }

  GenerationResponse chunk(std::string text, const GeneratedToken& t) const {
    GenerationResponse r{std::move(text), t.token, t.logprobs};
    r.from_draft = t.from_draft;
    r.drafted_tokens = mtp ? mtp->drafted() : speculative ? speculative->drafted() : 0;
    r.prompt_tokens = prompt_tokens;
    r.prompt_tps = prompt_tps;
    r.generation_tokens = n + 1;
    r.generation_tps = (n + 1) / seconds_since(tic);
    r.peak_memory = mx::get_peak_memory() / 1e9;
    return r;
  }

  tokenizer::Tokenizer tokenizer;
  TextGenerationOptions options;
  tokenizer::StreamingDetokenizer detokenizer;
  std::vector<int32_t> eos;
  StopSequences stop;
  StopSequences::Matcher matcher;
  int prompt_tokens;
  Clock::time_point tic;
  std::optional<TokenGenerator> plain;
  std::optional<SpeculativeTokenGenerator> speculative;
  std::optional<MtpTokenGenerator> mtp;
  double prompt_tps = 0;
  int n = 0;
  bool finished = false;
  bool stop_word = false;
  std::optional<GeneratedToken> last;
};

TextGenerator::TextGenerator(model::CausalLM& model, tokenizer::Tokenizer tokenizer, std::vector<int32_t> prompt,
                             TextGenerationOptions options, model::CacheList* cache) {
  if (options.max_tokens == 0)
    throw UsageError("max_tokens: must be non-zero (use -1 for no limit)");
  if (options.max_tokens < -1) throw UsageError("max_tokens: must be -1 (no limit) or positive");
  state_ = std::make_unique<State>(model, std::move(tokenizer), std::move(prompt), std::move(options), cache);
}

TextGenerator::~TextGenerator() = default;
TextGenerator::TextGenerator(TextGenerator&&) noexcept = default;

model::CacheList& TextGenerator::cache() {
  if (state_->plain) return state_->plain->cache();
  return state_->mtp ? state_->mtp->model_cache() : state_->speculative->model_cache();
}

std::optional<GenerationResponse> TextGenerator::next() {
  auto& s = *state_;
  if (s.finished) return std::nullopt;
  auto step = s.next_token();
  if (step) {
    if (s.n == 0) {
      s.prompt_tps = s.prompt_tokens / seconds_since(s.tic);
      s.tic = Clock::now();
    }
    s.last = *step;
    if (!s.is_eos(step->token)) {
      s.detokenizer.add_token(step->token);
      // The server checks its stop sequences on every chunk stream_generate yields.
      s.stop_word = s.matcher.advance(step->token);
      if (s.n + 1 != s.options.max_tokens) {
        auto r = s.chunk(s.detokenizer.take_segment(), *step);
        if (s.stop_word) {
          s.finished = true;
          r.finish_reason = FinishReason::stop;
        }
        ++s.n;
        return r;
      }
    }
  }
  // The end: an eos id, max_tokens reached, or (max_tokens == -1 only) the generator ran dry.
  s.finished = true;
  if (!s.last) return std::nullopt;
  s.detokenizer.finalize();
  auto r = s.chunk(s.detokenizer.take_segment(), *s.last);
  r.finish_reason = s.is_eos(s.last->token) || s.stop_word ? FinishReason::stop : FinishReason::length;
  return r;
}

GenerationResponse stream_generate(model::CausalLM& model, const tokenizer::Tokenizer& tokenizer,
                                   std::vector<int32_t> prompt, TextGenerationOptions options,
                                   const std::function<bool(const GenerationResponse&)>& on_chunk,
                                   model::CacheList* cache) {
  TextGenerator gen(model, tokenizer, std::move(prompt), std::move(options), cache);
  std::optional<GenerationResponse> last;
  while (auto r = gen.next()) {
    last = std::move(r);
    if (on_chunk && !on_chunk(*last)) break;
  }
  return std::move(*last);
}

}  // namespace mlxrt::generate
