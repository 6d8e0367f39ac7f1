#pragma once
/** The Aho-Corasick automaton of mlx-lm's _build_trie (mlx_lm/generate.py @ mlx-lm 0.32.2), over
 * any symbol type: failure links by breadth-first search, a node inherits its failure node's match
 * when it has none of its own, an empty pattern is ignored, and a repeated pattern keeps the
 * last index. Node 0 is the root. */
#include <deque>
#include <map>
#include <optional>
#include <vector>

namespace mlxrt::generate::detail {

template <typename Symbol>
class AhoCorasick {
 public:
  struct Match {
    size_t length;  // symbols in the matched pattern
    size_t index;   // which pattern
  };

  explicit AhoCorasick(const std::vector<std::vector<Symbol>>& patterns) {
    nodes_.emplace_back();
    for (size_t idx = 0; idx < patterns.size(); ++idx) {
      if (patterns[idx].empty()) continue;
      int node = 0;
      for (const auto& sym : patterns[idx]) {
        auto it = nodes_[node].next.find(sym);
        if (it == nodes_[node].next.end()) {
          nodes_.emplace_back();
          it = nodes_[node].next.emplace(sym, static_cast<int>(nodes_.size() - 1)).first;
        }
        node = it->second;
      }
      nodes_[node].match = Match{patterns[idx].size(), idx};
    }
    std::deque<int> queue;
    for (const auto& [sym, child] : nodes_[0].next) {
      nodes_[child].fail = 0;
      queue.push_back(child);
    }
    while (!queue.empty()) {
      int parent = queue.front();
      queue.pop_front();
      for (const auto& [sym, child] : nodes_[parent].next) {
        queue.push_back(child);
        int fail = nodes_[parent].fail;
        while (!nodes_[fail].next.count(sym) && fail != 0) fail = nodes_[fail].fail;
        auto it = nodes_[fail].next.find(sym);
        nodes_[child].fail = it != nodes_[fail].next.end() ? it->second : 0;
        if (!nodes_[child].match && nodes_[nodes_[child].fail].match)
          nodes_[child].match = nodes_[nodes_[child].fail].match;
      }
    }
  }

  /** Matcher.advance: follow failure links until `sym` continues a match or the root is reached. */
  int step(int node, const Symbol& sym) const {
    while (!nodes_[node].next.count(sym) && node != 0) node = nodes_[node].fail;
    auto it = nodes_[node].next.find(sym);
    return it != nodes_[node].next.end() ? it->second : node;
  }

  const std::optional<Match>& match(int node) const { return nodes_[node].match; }

 private:
  struct Node {
    std::map<Symbol, int> next;
    int fail = 0;
    std::optional<Match> match;
  };
  std::vector<Node> nodes_;
};

}  // namespace mlxrt::generate::detail
