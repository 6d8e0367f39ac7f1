// Port of _build_trie / StopSequences (mlx_lm/generate.py @ mlx-lm 0.32.2) for token ids.
#include "mlxrt/server/stop_sequences.h"

#include <deque>

namespace mlxrt::server {

StopSequences::StopSequences(const std::vector<std::vector<int32_t>>& sequences) {
  for (const auto& seq : sequences) {
    if (seq.empty()) continue;  // an empty sequence never completes in mlx-lm's matcher either
    int n = 0;
    for (int32_t t : seq) {
      auto it = nodes_[n].next.find(t);
      if (it == nodes_[n].next.end()) {
        nodes_.push_back(Node{});
        int child = static_cast<int>(nodes_.size()) - 1;
        nodes_[n].next[t] = child;
        n = child;
      } else {
        n = it->second;
      }
    }
    nodes_[n].match = true;
  }
  std::deque<int> queue;
  for (auto& [t, child] : nodes_[0].next) queue.push_back(child);
  while (!queue.empty()) {
    int parent = queue.front();
    queue.pop_front();
    for (auto& [t, child] : nodes_[parent].next) {
      queue.push_back(child);
      int fail = nodes_[parent].fail;
      while (!nodes_[fail].next.count(t) && fail != 0) fail = nodes_[fail].fail;
      auto it = nodes_[fail].next.find(t);
      nodes_[child].fail = it != nodes_[fail].next.end() ? it->second : 0;
      if (nodes_[nodes_[child].fail].match) nodes_[child].match = true;
    }
  }
}

bool StopSequences::Matcher::advance(int32_t token) {
  const auto& nodes = owner_->nodes_;
  int n = node_;
  while (!nodes[n].next.count(token) && n != 0) n = nodes[n].fail;
  auto it = nodes[n].next.find(token);
  if (it != nodes[n].next.end()) n = it->second;
  node_ = n;
  return nodes[n].match;
}

}  // namespace mlxrt::server
