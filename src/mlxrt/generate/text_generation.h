#pragma once
/** mlx-lm's stream_generate (mlx_lm/generate.py @ mlx-lm 0.32.2): prompt ids in, text chunks out.
 * Each chunk carries the new text segment (from the tokenizer's streaming detokenizer), the token,
 * its logprobs and the running statistics; the last chunk has a finish reason: "stop" when an eos
 * id (or a stop sequence) was produced — that token's text is not emitted — or "length" when
 * max_tokens tokens were produced.
 *
 * Stop strings: mlx-lm's server stops on the token sequences its stop words encode to
 * (StopSequences, Aho-Corasick over token ids) and strips the stop words from the text with its
 * TextStateMachine, holding back text that may be the start of one; both are in stop.h. The
 * generator below does the token-level part when `stop_words` is given (the chunk that completes a
 * stop word carries finish reason "stop"); its text is the raw detokenizer text, which a front end
 * passes through its TextStateMachine (stop words plus its reasoning/tool markers) as mlx-lm's
 * server does. */
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/generate/generate_step.h"
#include "mlxrt/generate/speculative.h"
#include "mlxrt/generate/stop.h"
#include "mlxrt/model/causal_lm.h"
#include "mlxrt/tokenizer/tokenizer.h"

namespace mlxrt::generate {

enum class FinishReason { stop, length };

/** "stop" / "length" (what the OpenAI-shaped APIs print). */
const char* to_string(FinishReason reason);

/** mlx-lm's GenerationResponse. */
struct GenerationResponse {
  std::string text;       // the next segment of decoded text (may be empty)
  int32_t token = 0;
  mx::array logprobs;     // [vocab], log-softmax of the processed logits
  int prompt_tokens = 0;
  double prompt_tps = 0;
  int generation_tokens = 0;
  double generation_tps = 0;
  double peak_memory = 0;  // GB (mx::get_peak_memory() / 1e9)
  std::optional<FinishReason> finish_reason;
  bool from_draft = false;  // speculative decoding: the token was drafted and accepted
  int drafted_tokens = 0;   // speculative decoding: tokens drafted so far (ours; mlx-lm has no count)
};

/** generate_step's options (max_tokens: -1 no limit, 0 an error as in mlx-lm; sampler; logits
 * processors; prefill step size; KV cache settings; prompt progress) plus the text-level ones. */
struct TextGenerationOptions : GenerateOptions {
  /** Replaces the tokenizer's eos ids when set (e.g. with extra eos tokens added). */
  std::optional<std::vector<int32_t>> eos_token_ids;
  /** Stop words as the server takes them: generation ends ("stop") once the tokens one encodes to
   * (without special tokens) have been produced. */
  std::vector<std::string> stop_words;
  /** Speculative decoding with this draft model (mlx-lm's draft_model; null: plain decoding). It
   * must share the main model's vocabulary; max_kv_size is then ignored, as mlx-lm ignores it, and
   * a caller's cache holds the main model's layer caches followed by the draft's. */
  model::CausalLM* draft_model = nullptr;
  /** Tokens drafted per step (mlx-lm's num_draft_tokens). */
  int num_draft_tokens = 3;
  /** Speculative decoding with the model's own multi-token-prediction head (MtpTokenGenerator;
   * the model must have been loaded with it). A caller's cache must then be empty. */
  bool mtp = false;
};

/** The prompt ids stream_generate makes from a string: special tokens added unless the tokenizer
 * has a bos token and the text already starts with it. */
std::vector<int32_t> encode_prompt(const tokenizer::Tokenizer& tokenizer, std::string_view text);

/** stream_generate as a pull iterator. */
class TextGenerator {
 public:
  /** Prefills `prompt` into `cache` (a fresh one when null; updated in place otherwise) and
   * dispatches the first step. UsageError for an empty prompt or max_tokens == 0. */
  TextGenerator(model::CausalLM& model, tokenizer::Tokenizer tokenizer, std::vector<int32_t> prompt,
                TextGenerationOptions options, model::CacheList* cache = nullptr);
  ~TextGenerator();
  TextGenerator(TextGenerator&&) noexcept;

  /** The next chunk; nullopt after the chunk that carries the finish reason. */
  std::optional<GenerationResponse> next();

  /** The main model's layer caches. */
  model::CacheList& cache();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/** Runs a TextGenerator to the end, calling `on_chunk` for every chunk; `on_chunk` returns false to
 * stop early (the last chunk it saw is returned). */
GenerationResponse stream_generate(model::CausalLM& model, const tokenizer::Tokenizer& tokenizer,
                                   std::vector<int32_t> prompt, TextGenerationOptions options,
                                   const std::function<bool(const GenerationResponse&)>& on_chunk,
                                   model::CacheList* cache = nullptr);

}  // namespace mlxrt::generate
