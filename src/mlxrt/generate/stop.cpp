// Port of StopSequences, TextStateMachine and make_stop_sequences of mlx_lm/generate.py
// (mlx-lm 0.32.2).
#include "mlxrt/generate/stop.h"

#include "mlxrt/generate/aho_corasick.h"
#include "mlxrt/tokenizer/utf8.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::generate {

namespace {

using TokenAutomaton = detail::AhoCorasick<int32_t>;
using TextAutomaton = detail::AhoCorasick<char32_t>;

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  for (size_t i = 0, len = 0; i < s.size(); i += len) out.push_back(tokenizer::detail::decode_at(s, i, len));
  return out;
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) tokenizer::detail::append_utf8(out, c);
  return out;
}

}  // namespace

// --- StopSequences -------------------------------------------------------------------------

StopSequences::StopSequences(const std::vector<std::vector<int32_t>>& sequences)
    : automaton_(std::make_shared<const TokenAutomaton>(sequences)) {}

StopSequences::Matcher::Matcher(std::shared_ptr<const void> automaton) : automaton_(std::move(automaton)) {}

bool StopSequences::Matcher::advance(int32_t token) {
  const auto& ac = *static_cast<const TokenAutomaton*>(automaton_.get());
  node_ = ac.step(node_, token);
  return ac.match(node_).has_value();
}

StopSequences::Matcher StopSequences::matcher() const { return Matcher(automaton_); }

StopSequences make_stop_sequences(const tokenizer::Tokenizer& tokenizer, const std::vector<int32_t>& eos_token_ids,
                                  const std::vector<std::string>& stop_words) {
  std::vector<std::vector<int32_t>> sequences;
  for (auto id : eos_token_ids) sequences.push_back({id});
  for (const auto& w : stop_words) sequences.push_back(tokenizer.encode(w, false));
  return StopSequences(sequences);
}

// --- TextStateMachine ----------------------------------------------------------------------

struct TextStateMachine::Impl {
  struct StateDef {
    TextAutomaton automaton{{}};
    std::vector<std::optional<std::string>> targets;  // per pattern index
  };
  std::map<std::string, StateDef> states;
  StateDef empty;

  const StateDef& def(const std::optional<std::string>& name) const {
    if (!name) return empty;
    auto it = states.find(*name);
    return it == states.end() ? empty : it->second;
  }
};

TextStateMachine::TextStateMachine(const Transitions& transitions) : impl_(std::make_shared<Impl>()) {
  for (const auto& [src, edges] : transitions) {
    std::vector<std::vector<char32_t>> patterns;
    Impl::StateDef def;
    for (const auto& [text, dst] : edges) {
      auto u = to_u32(text);
      patterns.emplace_back(u.begin(), u.end());
      def.targets.push_back(dst);
    }
    def.automaton = TextAutomaton(patterns);
    impl_->states[src] = std::move(def);
  }
}

TextStateMachine::~TextStateMachine() = default;

TextStateMachine::State TextStateMachine::make_state(const std::string& initial) const {
  return State{initial, 0, {}};
}

std::vector<TextStateMachine::Segment> TextStateMachine::split(State& state, const std::string& text) const {
  std::vector<Segment> segments;
  if (!state.name) {
    // A finished machine (mlx-lm would fail here): nothing more is emitted.
    segments.push_back({std::nullopt, ""});
    return segments;
  }
  auto buf = state.buffer;
  const size_t start = buf.size();
  buf += to_u32(text);
  const Impl::StateDef* def = &impl_->def(state.name);
  int n = state.node;
  size_t begin = 0, consumed = 0;
  for (size_t i = start; i < buf.size(); ++i) {
    n = def->automaton.step(n, buf[i]);
    const auto& match = def->automaton.match(n);
    if (match) {
      segments.push_back({state.name, to_utf8(buf.substr(begin, i + 1 - match->length - begin))});
      begin = consumed = i + 1;
      state.name = def->targets[match->index];
      if (!state.name) {
        segments.push_back({std::nullopt, ""});
        state.node = 0;
        state.buffer = buf.substr(consumed);
        return segments;
      }
      def = &impl_->def(state.name);
      n = 0;
    } else if (n == 0) {
      consumed = i + 1;  // at the root: no partial match pending, the text so far is safe
    }
  }
  segments.push_back({state.name, to_utf8(buf.substr(begin, consumed - begin))});
  state.node = n;
  state.buffer = buf.substr(consumed);
  return segments;
}

std::string TextStateMachine::flush(State& state) const {
  auto out = to_utf8(state.buffer);
  state.buffer.clear();
  state.node = 0;
  return out;
}

void TextStateMachine::discard(State& state) const {
  state.buffer.clear();
  state.node = 0;
}

TextStateMachine make_stop_word_state_machine(const std::vector<std::string>& stop_words) {
  if (stop_words.empty()) return TextStateMachine();
  TextStateMachine::Transitions t;
  for (const auto& w : stop_words) t["normal"].push_back({w, std::string("normal")});
  return TextStateMachine(t);
}

}  // namespace mlxrt::generate
