#pragma once
/** Port of TextStateMachine (mlx_lm/generate.py @ mlx-lm 0.32.2): follows decoded text through
 * states ("normal", "reasoning", "tool", ...) on control sequences ("<think>", "<tool_call>", stop
 * words), strips the sequences, and holds back text that may still become one.
 *
 * Matching runs over UTF-8 bytes: for valid UTF-8 patterns and text this finds exactly the
 * matches that Python's per-code-point matching finds, and never splits a code point. */
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlxrt::server {

/** state -> [(control sequence, next state)]; a next state of nullopt ends the text. */
using Transitions = std::map<std::string, std::vector<std::pair<std::string, std::optional<std::string>>>>;

class TextStateMachine {
 public:
  /** One (state, text) per state passed through by split(); the last one is the current state. */
  using Segment = std::pair<std::optional<std::string>, std::string>;

  struct State;

  explicit TextStateMachine(const Transitions& transitions = {});
  ~TextStateMachine();
  TextStateMachine(TextStateMachine&&) noexcept;
  TextStateMachine& operator=(TextStateMachine&&) noexcept;

  /** A fresh run starting in `initial`. */
  State make_state(const std::string& initial = "normal") const;

  /** Consumes a chunk of text; returns the safe text per state. */
  std::vector<Segment> split(State& state, const std::string& text) const;
  /** Emits what was held back (finish_reason "length"); returns (text, current state). */
  Segment flush(State& state) const;
  /** Drops what was held back (finish_reason "stop"); returns the current state. */
  std::optional<std::string> discard(State& state) const;

  struct Trie;
  struct State {
    std::optional<std::string> name;
    int node = 0;  // position in the state's automaton
    std::string buffer;
  };

 private:
  std::map<std::string, std::unique_ptr<Trie>> tries_;
  std::unique_ptr<Trie> empty_;
  const Trie& trie_for(const std::optional<std::string>& name) const;
};

/** mlx_lm's make_text_state_machine for what we support: reasoning markers, tool-call markers,
 * and stop words as self-transitions in every state. */
struct MarkerSet {
  std::optional<std::pair<std::string, std::string>> think;      // (start, end)
  std::optional<std::pair<std::string, std::string>> tool_call;  // (start, end)
};
TextStateMachine make_text_state_machine(const MarkerSet& markers, const std::vector<std::string>& stop_words);

}  // namespace mlxrt::server
