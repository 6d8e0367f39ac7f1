#pragma once
/** How one process of a distributed run holds its part of a model, as mlx-lm's sharded_load splits
 * it: tensor parallel (`model.shard(group)`: every layer, each rank a slice of its heads and hidden
 * units) or pipeline parallel (`model.model.pipeline(group)`: each rank a range of whole layers). */
#include <string>
#include <vector>

#include <mlx/array.h>
#include <mlx/distributed/distributed.h>

namespace mlxrt::model {

namespace mx = mlx::core;

struct Parallel {
  enum class Mode { tensor, pipeline };
  Mode mode = Mode::tensor;
  mx::distributed::Group group;

  int rank() const { return group.rank(); }
  int size() const { return group.size(); }
};

/** The pipeline's output on every rank while it stays in the graph, as mlx-lm's PipelineMixin
 * broadcasts it: all_gather(h)[:B]. */
mx::array pipeline_output_everywhere(const mx::array& h, const mx::distributed::Group& group);

/** The layers [start, end) rank `rank` of `size` runs in mlx-lm's PipelineMixin.pipeline with its
 * even split: the ranks are ordered last layers first (rank 0 runs the last layers, rank size-1 the
 * first), and the low ranks take the extra layers. ConfigError when a rank would get none. */
struct LayerRange {
  int start = 0, end = 0;
};
LayerRange pipeline_layers(int num_layers, int rank, int size, const std::string& source);

namespace nn {

/** How mlx.nn.layers.distributed shards a linear layer's parameters. */
enum class Shard {
  none,
  all_to_sharded,  // rows (output features) split: the output is sharded across the group
  sharded_to_all,  // columns (input features) split: partial outputs summed over the group (all_sum)
};

/** `t` split into `size` equal parts along `axis` and part `rank` kept, contiguous (_shard with one
 * segment: mx.contiguous(mx.split(t, size, axis)[rank])). ConfigError naming `name` when the axis
 * does not divide. */
mx::array shard_tensor(const mx::array& t, int axis, int rank, int size, const std::string& name);

/** _shard with segments: `t` cut along `axis` at the indices `segments` (e.g. a fused q/k/v at
 * [key_dim, 2 * key_dim]), each part split into `size` equal parts and part `rank` kept, the kept
 * parts concatenated and made contiguous. ConfigError naming `name` when a part does not divide. */
mx::array shard_tensor(const mx::array& t, int axis, const std::vector<int>& segments, int rank, int size,
                       const std::string& name);

/** mlx_lm.models.base.gather_last_axis: x's last axis, split across `group` in rank order,
 * gathered whole on every rank (all_gather of the rows, then the ranks' parts side by side). */
mx::array gather_last_axis(const mx::array& x, const mx::distributed::Group& group);

}  // namespace nn

}  // namespace mlxrt::model
