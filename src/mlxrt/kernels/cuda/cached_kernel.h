#pragma once
/** mlxrt's CUDA kernels' launches: MLX's custom-kernel primitive made once per distinct launch, and
 * (opted in with MLXRT_CUDA_SELF_COMPILE=1) the kernel compiled by mlxrt itself.
 *
 * MLX's kernel function builds the whole source of the kernel (its header, its signature, one line
 * per template argument: about 12 KB for the L3 products) each time it is called, then wraps it in
 * a new CustomKernel primitive. A decoding step calls our kernels a few times a layer, and the step
 * is bound by the host's time (bench/RESULTS.md), so that text costs microseconds a node.
 * CachedKernel makes the primitive once per distinct launch (stream, template arguments, input and
 * output types, grid and threadgroup: everything the primitive holds) and gives each later call new
 * arrays on the same primitive, as MLX's own compile() replays a traced graph's primitives. The
 * primitive is immutable once built, so the nodes that share it compute exactly what separate ones
 * would.
 *
 * Self-compiled route (kernel_source.h, nvrtc.h): the same body and device code compiled without
 * MLX's prelude, 0.1-0.3 s a kernel instead of 1.1-1.3 s, and launched as an MLX precompiled kernel
 * (the inputs, the outputs, then the read shapes as int scalars). Its machine code is MLX's compile
 * of the same kernel (tools/cuda/sass_compare.py); it stays opt-in until a GPU run has checked the
 * launch (the kernel tests through it). The images are kept on disk (kernel_image_cache.h), so a
 * later process loads them instead. Where NVRTC or the CUDA headers cannot be found, or a compile
 * fails, the launch takes MLX's function (with one warning on stderr). Kernels whose spec says self_compile = false (L1 ports of mlx-lm's kernels)
 * always take MLX's function.
 *
 * The entries are a cache of compiled-launch descriptions, like MLX's own kernel cache: made under
 * a mutex, never changed or removed after. Calls with an init value, verbose output or an explicit
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

#include "mlxrt/kernels/cuda/kernel_source.h"

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

/** MLXRT_CUDA_SELF_COMPILE=1. */
bool self_compile_opted_in();

class CachedKernel {
 public:
  explicit CachedKernel(KernelSpec spec);

  /** As MLX's CustomKernelFunction. */
  std::vector<mx::array> operator()(const std::vector<mx::array>& inputs, const std::vector<mx::Shape>& output_shapes,
                                    const std::vector<mx::Dtype>& output_dtypes, std::tuple<int, int, int> grid,
                                    std::tuple<int, int, int> threadgroup,
                                    const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args,
                                    std::optional<float> init_value, bool verbose, mx::StreamOrDevice s) const;

  /** Whether launches take the self-compiled route (opted in, allowed by the spec, NVRTC found). */
  bool self_compiled() const;

 private:
  // The precompiled primitive's first launch: compiles the program (once per distinct text).
  std::vector<mx::array> launch_self_compiled(
      const std::vector<mx::array>& inputs, const std::vector<mx::Shape>& output_shapes,
      const std::vector<mx::Dtype>& output_dtypes, std::tuple<int, int, int> grid,
      std::tuple<int, int, int> threadgroup,
      const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args) const;

  KernelSpec spec_;
  std::vector<bool> shapes_read_;
  mx::fast::CustomKernelFunction kernel_;
  mutable std::mutex mutex_;
  mutable std::map<std::vector<int64_t>, std::shared_ptr<mx::Primitive>> launches_;
  mutable std::map<std::string, std::string> images_;  // program text -> compiled image
};

}  // namespace mlxrt::kernels::cuda
