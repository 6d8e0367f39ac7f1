#pragma once
/** Mixed-adapter batches (ours; mlx-lm batches one adapter at a time): one model bound with
 * several adapters, each in a numbered slot, and, per forward call, the slot each batch row
 * computes with. An adapted layer computes its base output once and each slot's adapted output
 * over the whole batch, then keeps for every row its own slot's result. Every output a row keeps
 * is the op the model bound with that adapter alone runs on a batch of the same shape, so a
 * mixed batch gives each row the bytes that a batch of the same size running only that row's
 * adapter gives it. */
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <mlx/array.h>

#include "mlxrt/model/nn/lora.h"

namespace mlxrt::model::nn {

namespace mx = mlx::core;

class AdapterRows {
 public:
  /** The slot of each batch row, in row order, for the forward calls that follow. */
  void set(const std::vector<int>& slot_of_row);
  /** Every row (any batch size) computes with `slot`. */
  void set_uniform(int slot);

  /** A layer's output from its `base` output and its slots' adapted outputs: `adapted(slot)` is
   * the layer's output with that slot's adapter, or nullopt when that adapter leaves the layer as
   * it is. Rows are the leading axis of `base`. */
  mx::array select(const mx::array& base, const std::function<std::optional<mx::array>(int slot)>& adapted) const;

 private:
  std::vector<int> slots_;             // the distinct slots in use, in first-row order
  std::vector<mx::array> masks_;       // per slot in slots_: [rows] bool, true where the row uses it
  bool uniform_ = true;
};

/** What an adapted layer of a mixed-adapter model holds: its delta under each slot (null where
 * that slot's adapter does not adapt it) and the model's row assignment. */
struct SlotDeltas {
  std::shared_ptr<const AdapterRows> rows;
  std::vector<std::shared_ptr<const LoraDelta>> deltas;  // by slot
};

}  // namespace mlxrt::model::nn
