#pragma once
/** Constrained decoding (structured output): a JSON schema, any JSON object or a GBNF grammar
 * becomes a per-step token mask over the model's vocabulary, so that what is generated always
 * parses (and validates against the schema).
 *
 * The engine is xgrammar's C++ library (schema -> grammar -> adaptive token-mask cache -> bitmask),
 * fed with each token's raw bytes from our tokenizer. A constraint runs as the last logits processor
 * (after the others, before log-softmax and the sampler): tokens the grammar does not allow next get
 * -inf; once the grammar is complete only the stop tokens remain. With a draft model the
 * processor sees the draft's guesses and the main model's rows in turn: it follows the history it
 * is given, rolling the grammar back to where that history parts from the one it has seen. */
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mlx/array.h>
#include <nlohmann/json.hpp>

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
  /** Brings the grammar to the state after `generated` (every token sampled so far): the tokens it
   * shares with what was accepted before stay, the rest is rolled back, the new ones accepted. */
  void follow(const std::vector<int32_t>& generated);
  /** logits [1, vocab] with every token the grammar does not allow now set to -inf (unchanged once
   * the grammar has ended). Computes the mask on the host: call it while the device is busy. */
  mx::array mask(const mx::array& logits);
  /** The grammar has been completed by a stop token. */
  bool ended() const;

 private:
  std::shared_ptr<State> state_;
  std::vector<int32_t> history_;  // the tokens follow() has brought the grammar through
  std::vector<bool> taken_;       // per history token: the grammar accepted it (not past its end)
};

/** The constraint as the generator's last logits processor. The first call's history is the
 * prompt (all of it in generate_step, its last token in speculative decoding); from then on what
 * follows it in the history is what has been sampled, which the grammar follows before masking. The
 * device computes the step's logits while the host reads the history and computes the mask. */
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

  /** A reply that is exactly one tool call written as `start` + "\n" + a JSON object
   * {"name": NAME, "arguments": ARGS} + "\n" + `end` (the format of Qwen's and Hermes' templates,
   * mlx-lm's json_tools), NAME one of `tools` (OpenAI chat tools: {"type": "function", "function":
   * {"name", "parameters"}}) and ARGS valid against that tool's parameters (strict); then only a
   * stop token. UsageError "<what>: ..." for a tool without a name or with parameters the engine
   * does not enforce. */
  std::shared_ptr<TokenConstraint> tool_call(const std::string& start, const std::string& end,
                                             const nlohmann::ordered_json& tools, const std::string& what);

  int vocab_size() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace mlxrt::structured
