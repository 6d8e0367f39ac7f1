// Port of TextStateMachine and make_text_state_machine (mlx_lm/generate.py @ mlx-lm 0.32.2).
#include "mlxrt/server/text_state_machine.h"

#include <array>
#include <deque>
#include <set>

namespace mlxrt::server {

/** An Aho-Corasick automaton over bytes (mlx-lm's _build_trie): goto edges, failure links, and the
 * (pattern length, edge index) that ends at each node, propagated along failure links. */
struct TextStateMachine::Trie {
  struct Node {
    std::map<unsigned char, int> next;
    int fail = 0;
    std::optional<std::pair<size_t, size_t>> match;  // (pattern bytes, transition index)
  };
  std::vector<Node> nodes{Node{}};
  std::vector<std::optional<std::string>> targets;

  void add(const std::string& pattern, size_t index) {
    int n = 0;
    for (unsigned char c : pattern) {
      auto it = nodes[n].next.find(c);
      if (it == nodes[n].next.end()) {
        nodes.push_back(Node{});
        int child = static_cast<int>(nodes.size()) - 1;
        nodes[n].next[c] = child;
        n = child;
      } else {
        n = it->second;
      }
    }
    // A later duplicate pattern overwrites the earlier one, as the dict assignment does.
    nodes[n].match = std::make_pair(pattern.size(), index);
  }

  void link() {
    std::deque<int> queue;
    for (auto& [c, child] : nodes[0].next) {
      nodes[child].fail = 0;
      queue.push_back(child);
    }
    while (!queue.empty()) {
      int parent = queue.front();
      queue.pop_front();
      for (auto& [c, child] : nodes[parent].next) {
        queue.push_back(child);
        int fail = nodes[parent].fail;
        while (!nodes[fail].next.count(c) && fail != 0) fail = nodes[fail].fail;
        auto it = nodes[fail].next.find(c);
        nodes[child].fail = (it != nodes[fail].next.end() && it->second != child) ? it->second : 0;
        if (!nodes[child].match && nodes[nodes[child].fail].match) nodes[child].match = nodes[nodes[child].fail].match;
      }
    }
  }

  int advance(int n, unsigned char c) const {
    while (!nodes[n].next.count(c) && n != 0) n = nodes[n].fail;
    auto it = nodes[n].next.find(c);
    return it != nodes[n].next.end() ? it->second : n;
  }
};

TextStateMachine::TextStateMachine(const Transitions& transitions) : empty_(std::make_unique<Trie>()) {
  for (const auto& [src, edges] : transitions) {
    auto trie = std::make_unique<Trie>();
    for (size_t i = 0; i < edges.size(); ++i) {
      trie->add(edges[i].first, i);
      trie->targets.push_back(edges[i].second);
    }
    trie->link();
    tries_[src] = std::move(trie);
  }
}

TextStateMachine::~TextStateMachine() = default;
TextStateMachine::TextStateMachine(TextStateMachine&&) noexcept = default;
TextStateMachine& TextStateMachine::operator=(TextStateMachine&&) noexcept = default;

const TextStateMachine::Trie& TextStateMachine::trie_for(const std::optional<std::string>& name) const {
  if (!name) return *empty_;
  auto it = tries_.find(*name);
  return it == tries_.end() ? *empty_ : *it->second;
}

TextStateMachine::State TextStateMachine::make_state(const std::string& initial) const {
  return State{initial, 0, ""};
}

std::vector<TextStateMachine::Segment> TextStateMachine::split(State& state, const std::string& text) const {
  std::vector<Segment> segments;
  if (!state.name) {  // the text has ended: nothing more is emitted
    segments.emplace_back(std::nullopt, "");
    return segments;
  }
  size_t start = state.buffer.size();
  std::string buf = state.buffer + text;
  const Trie* trie = &trie_for(state.name);
  int n = state.node;
  size_t begin = 0, consumed = 0;
  for (size_t i = start; i < buf.size(); ++i) {
    n = trie->advance(n, static_cast<unsigned char>(buf[i]));
    const auto& match = trie->nodes[n].match;
    if (match) {
      segments.emplace_back(state.name, buf.substr(begin, i + 1 - match->first - begin));
      begin = consumed = i + 1;
      state.name = trie->targets[match->second];
      if (!state.name) {
        segments.emplace_back(std::nullopt, "");
        state.node = 0;
        state.buffer = buf.substr(consumed);
        return segments;
      }
      trie = &trie_for(state.name);
      n = 0;
    } else if (n == 0) {
      consumed = i + 1;
    }
  }
  segments.emplace_back(state.name, buf.substr(begin, consumed - begin));
  state.node = n;
  state.buffer = buf.substr(consumed);
  return segments;
}

TextStateMachine::Segment TextStateMachine::flush(State& state) const {
  std::string out = std::move(state.buffer);
  state.buffer.clear();
  state.node = 0;
  return {state.name, out};
}

std::optional<std::string> TextStateMachine::discard(State& state) const {
  state.buffer.clear();
  state.node = 0;
  return state.name;
}

TextStateMachine make_text_state_machine(const MarkerSet& markers, const std::vector<std::string>& stop_words) {
  Transitions t;
  if (markers.think) {
    t["normal"].emplace_back(markers.think->first, "reasoning");
    t["reasoning"] = {{markers.think->second, "normal"}};
  }
  if (markers.tool_call) {
    t["normal"].emplace_back(markers.tool_call->first, "tool");
    if (markers.think) t["reasoning"].emplace_back(markers.tool_call->first, "tool");
    t["tool"] = {};
    if (!markers.tool_call->second.empty()) t["tool"].emplace_back(markers.tool_call->second, "normal");
  }
  if (!stop_words.empty()) {
    std::set<std::string> states{"normal"};
    for (const auto& [name, _] : t) states.insert(name);
    for (const auto& name : states)
      for (const auto& w : stop_words) t[name].emplace_back(w, name);
  }
  return TextStateMachine(t);
}

}  // namespace mlxrt::server
