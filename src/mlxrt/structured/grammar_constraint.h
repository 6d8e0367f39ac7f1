#pragma once
/** Constrained decoding (structured output): a JSON schema, any JSON object or a GBNF grammar
 * becomes a per-step token mask over the model's vocabulary, so that what is generated always
 * parses (and validates against the schema).
 *
 * The engine is xgrammar's C++ library (schema -> grammar -> adaptive token-mask cache -> bitmask),
 * fed with each token's raw bytes from our tokenizer. A constraint runs as the last logits processor
 * (after the others, before log-softmax and the sampler): tokens the grammar does not allow next get
 * -inf; once the grammar is complete only the stop tokens remain. Plain decoding only (a draft
 * model's verification step would hand it several tokens at once). */
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/generate/generate_step.h"
#include "mlxrt/tokenizer/tokenizer.h"

namespace mlxrt::structured {

namespace mx = mlx::core;

/** One generation's matcher: the tokens accepted so far and the mask of what may follow. */
class TokenConstraint {
 public:
  struct State;
  explicit TokenConstraint(std::shared_ptr<State> state);
  ~TokenConstraint();

  /** Advances the grammar by a sampled token. After the grammar has ended (a stop token was
   * accepted) further tokens are ignored: the generator computes one step past the end. */
  void accept(int32_t token);
  /** logits [1, vocab] with every token the grammar does not allow now set to -inf (unchanged once
   * the grammar has ended). Computes the mask on the host: call it while the device is busy. */
  mx::array mask(const mx::array& logits);
  /** The grammar has been completed by a stop token. */
  bool ended() const;

 private:
  std::shared_ptr<State> state_;
};

/** The constraint as TokenGenerator's last logits processor: from the second call on, the newest
 * token of the history is the one sampled last, and the grammar accepts it before masking. The
 * device computes the step's logits while the host waits for that token and computes the mask. */
generate::LogitsProcessor constraint_processor(std::shared_ptr<TokenConstraint> constraint);

/** Compiles constraints for one tokenizer and model vocabulary (the token table is built once, and
 * compiled grammars are cached by the engine). */
class GrammarEngine {
 public:
  /** `vocab_size`: the width of the model's logits (ids past the tokenizer's are never allowed);
   * `stop_tokens`: the ids that end the generation (allowed once the grammar is complete). */
  GrammarEngine(const tokenizer::Tokenizer& tokenizer, int vocab_size, std::vector<int32_t> stop_tokens);
  ~GrammarEngine();

  /** A JSON schema (JSON text). `strict`: properties and items the schema does not name are not
   * generated (OpenAI's strict mode). UsageError "<what>: ..." for malformed JSON, a schema keyword
   * the engine does not enforce (named with its location), an unknown string format, or a schema
   * the engine rejects. */
  std::shared_ptr<TokenConstraint> json_schema(const std::string& schema_text, bool strict, const std::string& what);
  /** Any JSON object (response_format {"type": "json_object"}). */
  std::shared_ptr<TokenConstraint> json_object();
  /** A GBNF grammar (llama.cpp's notation, start rule `root`). UsageError "<what>: ..." when it
   * does not parse. */
  std::shared_ptr<TokenConstraint> gbnf(const std::string& grammar_text, const std::string& what);

  int vocab_size() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace mlxrt::structured
