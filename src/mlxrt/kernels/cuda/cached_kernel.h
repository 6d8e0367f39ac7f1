#pragma once
/** mx::fast::cuda_kernel's launches without assembling the kernel's source text at every call.
 *
 * MLX's kernel function builds the whole source of the kernel (its header, its signature, one line
 * per template argument: about 12 KB for the L3 products) each time it is called, then wraps it in
 * a new CustomKernel primitive. A decoding step calls our kernels a few times a layer, and the step
 * is bound by the host's time (bench/RESULTS.md), so that text costs microseconds a node. CachedKernel
 * makes the primitive once per distinct launch (stream, template arguments, input and output types,
 * grid and threadgroup: everything the primitive holds) and gives each later call new arrays on the
 * same primitive, as MLX's own compile() replays a traced graph's primitives. The primitive is
 * immutable once built, so the nodes that share it compute exactly what separate ones would.
 *
 * The entries are a cache of compiled-launch descriptions, like MLX's own kernel cache: made under a
 * mutex, never changed or removed after. Calls with an init value, verbose output or an explicit
 * stream go straight to MLX's function. */
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <mlx/array.h>
#include <mlx/fast.h>

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

class CachedKernel {
 public:
  explicit CachedKernel(mx::fast::CustomKernelFunction kernel) : kernel_(std::move(kernel)) {}

  /** As MLX's CustomKernelFunction. */
  std::vector<mx::array> operator()(const std::vector<mx::array>& inputs, const std::vector<mx::Shape>& output_shapes,
                                    const std::vector<mx::Dtype>& output_dtypes, std::tuple<int, int, int> grid,
                                    std::tuple<int, int, int> threadgroup,
                                    const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args,
                                    std::optional<float> init_value, bool verbose, mx::StreamOrDevice s) const;

 private:
  mx::fast::CustomKernelFunction kernel_;
  mutable std::mutex mutex_;
  mutable std::map<std::vector<int64_t>, std::shared_ptr<mx::Primitive>> launches_;
};

}  // namespace mlxrt::kernels::cuda
