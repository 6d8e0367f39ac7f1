// Port of mlx_lm/models/pipeline.py's layer split (mlx-lm 0.32.2) and of _shard in
// mlx/nn/layers/distributed.py (mlx 0.32.4).
#include "mlxrt/model/parallel.h"

#include <mlx/ops.h>

#include "mlxrt/util/errors.h"

namespace mlxrt::model {

LayerRange pipeline_layers(int num_layers, int rank, int size, const std::string& source) {
  if (num_layers < size)
    throw ConfigError(source + ": 'num_hidden_layers' is " + std::to_string(num_layers) + ", fewer than the " +
                      std::to_string(size) + " pipeline ranks (each rank needs at least one layer)");
  const int base = num_layers / size, extra = num_layers % size;
  auto split = [&](int r) { return base + (r < extra ? 1 : 0); };
  // Rank r runs the layers after those of ranks r+1 ... size-1.
  int start = 0;
  for (int r = rank + 1; r < size; ++r) start += split(r);
  return {start, start + split(rank)};
}

namespace nn {

mx::array shard_tensor(const mx::array& t, int axis, int rank, int size, const std::string& name) {
  const int ax = axis < 0 ? axis + static_cast<int>(t.ndim()) : axis;
  const int n = t.shape(ax);
  if (n % size != 0)
    throw ConfigError(name + ": its axis " + std::to_string(ax) + " of size " + std::to_string(n) +
                      " does not split evenly across " + std::to_string(size) + " ranks (tensor parallel)");
  mx::Shape start(t.ndim(), 0), stop = t.shape();
  start[ax] = rank * (n / size);
  stop[ax] = (rank + 1) * (n / size);
  return mx::contiguous(mx::slice(t, start, stop));
}

}  // namespace nn

}  // namespace mlxrt::model
