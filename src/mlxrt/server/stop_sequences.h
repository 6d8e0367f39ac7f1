#pragma once
/** Port of StopSequences (mlx_lm/generate.py @ mlx-lm 0.32.2): an Aho-Corasick automaton over token
 * ids (the eos ids and each stop word's tokens); a Matcher follows one stream through it. */
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace mlxrt::server {

class StopSequences {
 public:
  explicit StopSequences(const std::vector<std::vector<int32_t>>& sequences);

  class Matcher {
   public:
    /** Consumes one token; true when a stop sequence has just completed. */
    bool advance(int32_t token);

   private:
    friend class StopSequences;
    explicit Matcher(std::shared_ptr<const StopSequences> owner) : owner_(std::move(owner)) {}
    std::shared_ptr<const StopSequences> owner_;
    int node_ = 0;
  };

  /** A fresh matcher; it keeps the automaton alive. */
  static Matcher matcher(std::shared_ptr<const StopSequences> sequences) { return Matcher(std::move(sequences)); }

 private:
  struct Node {
    std::map<int32_t, int> next;
    int fail = 0;
    bool match = false;
  };
  std::vector<Node> nodes_{Node{}};
};

}  // namespace mlxrt::server
