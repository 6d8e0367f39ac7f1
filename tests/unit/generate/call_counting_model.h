#pragma once
// A fake model for the generators' tests: the next token is (last + 1) % vocab, and every forward
// call (a prefill chunk or a step) is recorded with its number of rows and of positions.
#include <vector>

#include <mlx/ops.h>

#include "mlxrt/model/causal_lm.h"

namespace mlxrt::generate::test_support {

namespace mx = mlx::core;

class CallCountingModel : public model::CausalLM {
 public:
  explicit CallCountingModel(int vocab) : vocab_(vocab) {}
  mx::array operator()(const mx::array& inputs, model::CacheList*) override {
    rows.push_back(inputs.shape(0));
    lengths.push_back(inputs.shape(1));
    auto next = mx::remainder(mx::add(inputs, mx::array(1)), mx::array(vocab_));
    auto hit = mx::equal(mx::expand_dims(next, -1), mx::arange(vocab_));
    return mx::multiply(mx::astype(hit, mx::float32), mx::array(10.0f));
  }
  model::CacheList make_cache() const override { return {}; }
  int vocab_size() const override { return vocab_; }
  int calls() const { return static_cast<int>(rows.size()); }
  std::vector<int> rows;     // of every call
  std::vector<int> lengths;  // of every call: its positions a row

 private:
  int vocab_;
};

}  // namespace mlxrt::generate::test_support
