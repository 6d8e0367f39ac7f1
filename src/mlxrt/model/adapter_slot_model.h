#pragma once
/** One slot of a mixed-adapter model (nn/adapter_rows.h) seen as a model of its own: every forward
 * call first points all rows at the slot, so the mixed model computes exactly as the model bound
 * with that slot's adapter alone. */
#include <memory>
#include <vector>

#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/nn/adapter_rows.h"

namespace mlxrt::model {

class AdapterSlotModel : public CausalLM {
 public:
  AdapterSlotModel(CausalLM& mixed, std::shared_ptr<nn::AdapterRows> rows, int slot)
      : mixed_(mixed), rows_(std::move(rows)), slot_(slot) {}

  mx::array operator()(const mx::array& inputs, CacheList* cache) override {
    rows_->set_uniform(slot_);
    return mixed_(inputs, cache);
  }
  mx::array hidden_states(const mx::array& inputs, CacheList* cache) override {
    rows_->set_uniform(slot_);
    return mixed_.hidden_states(inputs, cache);
  }
  CacheList make_cache() const override { return mixed_.make_cache(); }
  bool defines_make_cache() const override { return mixed_.defines_make_cache(); }
  std::vector<KvShape> kv_shapes() const override { return mixed_.kv_shapes(); }
  std::vector<std::vector<mx::Shape>> array_state_shapes() const override { return mixed_.array_state_shapes(); }
  int vocab_size() const override { return mixed_.vocab_size(); }
  bool has_hidden_states() const override { return mixed_.has_hidden_states(); }

 private:
  CausalLM& mixed_;
  std::shared_ptr<nn::AdapterRows> rows_;
  int slot_;
};

}  // namespace mlxrt::model
