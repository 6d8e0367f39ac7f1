// Port of mlx_lm/models/pipeline.py's layer split and base.py's gather_last_axis (mlx-lm 0.32.2), and
// of _shard in mlx/nn/layers/distributed.py (mlx 0.32.4).
#include "mlxrt/model/parallel.h"

#include <mlx/distributed/ops.h>
#include <mlx/ops.h>

#include "mlxrt/util/errors.h"

namespace mlxrt::model {

mx::array pipeline_output_everywhere(const mx::array& h, const mx::distributed::Group& group) {
  const int B = h.shape(0);
  auto all = mx::distributed::all_gather(h, group);
  mx::Shape start(all.ndim(), 0), stop = all.shape();
  stop[0] = B;
  return mx::slice(all, start, stop);
}

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

mx::array shard_tensor(const mx::array& t, int axis, const std::vector<int>& segments, int rank, int size,
                       const std::string& name) {
  if (segments.empty()) return shard_tensor(t, axis, rank, size, name);
  const int ax = axis < 0 ? axis + static_cast<int>(t.ndim()) : axis;
  // mx.concatenate([mx.split(part, N, axis)[r] for part in mx.split(t, segments, axis)], axis)
  std::vector<mx::array> kept;
  for (const auto& part : mx::split(t, mx::Shape(segments.begin(), segments.end()), ax)) {
    const int n = part.shape(ax);
    if (n % size != 0)
      throw ConfigError(name + ": a segment of size " + std::to_string(n) + " of its axis " + std::to_string(ax) +
                        " does not split evenly across " + std::to_string(size) + " ranks (tensor parallel)");
    mx::Shape start(part.ndim(), 0), stop = part.shape();
    start[ax] = rank * (n / size);
    stop[ax] = (rank + 1) * (n / size);
    kept.push_back(mx::slice(part, start, stop));
  }
  return mx::contiguous(mx::concatenate(kept, ax));
}

mx::array gather_last_axis(const mx::array& x, const mx::distributed::Group& group) {
  const int n = group.size(), size = x.shape(-1);
  auto parts = mx::distributed::all_gather(mx::reshape(x, {-1, size}), group);
  // (ranks * rows, size) to (rows, ranks * size), in rank order.
  parts = mx::transpose(mx::reshape(parts, {n, -1, size}), {1, 0, 2});
  mx::Shape shape = x.shape();
  shape.back() = n * size;
  return mx::reshape(parts, shape);
}

}  // namespace nn

}  // namespace mlxrt::model
