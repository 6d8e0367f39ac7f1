#pragma once
/** Stop conditions of mlx-lm's server (mlx_lm/generate.py @ mlx-lm 0.32.2):
 * - StopSequences: an Aho-Corasick automaton over token-id sequences (the eos ids and the tokens
 *   each stop word encodes to); any completed sequence means "stop".
 * - TextStateMachine: matches decoded text against control strings (stop words, reasoning and tool
 *   markers), strips them, and holds back text that may be the start of one until it is known not
 *   to be. */
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mlxrt/tokenizer/tokenizer.h"

namespace mlxrt::generate {

class StopSequences {
 public:
  explicit StopSequences(const std::vector<std::vector<int32_t>>& sequences = {});

  /** One stream's position in the automaton. */
  class Matcher {
   public:
    /** Consumes one token; true when a stop sequence just completed. */
    bool advance(int32_t token);

   private:
    friend class StopSequences;
    explicit Matcher(std::shared_ptr<const void> automaton);
    std::shared_ptr<const void> automaton_;
    int node_ = 0;
  };

  Matcher matcher() const;

 private:
  std::shared_ptr<const void> automaton_;
};

/** make_stop_sequences: the eos ids, each a sequence of one, and every stop word encoded without
 * special tokens (an empty encoding is ignored). */
StopSequences make_stop_sequences(const tokenizer::Tokenizer& tokenizer, const std::vector<int32_t>& eos_token_ids,
                                  const std::vector<std::string>& stop_words);

/** The text state machine. States are named; a transition is (text, next state). A transition to
 * std::nullopt ends the stream (a None state in mlx-lm). Matching is on Unicode code points, as
 * Python's str indexing is. */
class TextStateMachine {
 public:
  using Transitions = std::map<std::string, std::vector<std::pair<std::string, std::optional<std::string>>>>;
  explicit TextStateMachine(const Transitions& transitions = {});
  ~TextStateMachine();

  /** A stream's runtime state (state name, automaton node, held-back text). */
  struct State {
    std::optional<std::string> name;
    int node = 0;
    std::u32string buffer;
  };
  /** One (state name, text) per state passed. */
  struct Segment {
    std::optional<std::string> state;
    std::string text;
  };

  State make_state(const std::string& initial = "normal") const;
  /** Consumes a chunk of text; the last segment belongs to the current state. */
  std::vector<Segment> split(State& state, const std::string& text) const;
  /** The held-back text, released (on finish "length"). */
  std::string flush(State& state) const;
  /** Drops the held-back text (on finish "stop"). */
  void discard(State& state) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/** make_text_state_machine for stop words alone: each word a self-transition of "normal" (it is
 * stripped, the state does not change). */
TextStateMachine make_stop_word_state_machine(const std::vector<std::string>& stop_words);

}  // namespace mlxrt::generate
