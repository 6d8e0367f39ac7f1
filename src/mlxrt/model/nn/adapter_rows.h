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

  using Adapted = std::function<std::optional<mx::array>(int slot)>;
  /** A layer's output from its `base` output and its slots' adapted outputs: `adapted(slot)` is
   * the layer's output with that slot's adapter, or nullopt when that adapter leaves the layer as
   * it is. The leading axis of `base` is the batch's rows, or their tokens flattened row by row
   * (a multiple of the rows: olmoe's router, an unsorted switch layer over flattened tokens). */
  mx::array select(const mx::array& base, const Adapted& adapted) const;
  /** The same for a switch layer's (token, expert) pairs in expert order: element i of the leading
   * axis belongs to token `token_of[i]` of `num_tokens`, the batch's tokens flattened row by row. */
  mx::array select_pairs(const mx::array& base, const mx::array& token_of, int num_tokens, const Adapted& adapted) const;

 private:
  /** select's loop: `mask(i)` is slot i's mask over the leading axis of `base`, shaped to broadcast. */
  mx::array choose(const mx::array& base, const Adapted& adapted, const std::function<mx::array(size_t)>& mask) const;

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
