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
 * Self-compiled route (MLXRT_CUDA_SELF_COMPILE=1; kernel_source.h, nvrtc.h, mlx_kernel_cache.h):
 * when a launch makes a new primitive, mlxrt compiles the same kernel without MLX's prelude
 * (0.1-0.3 s instead of MLX's 1.1-1.3 s) and writes it into MLX's on-disk kernel cache under the
 * module name MLX will look for; MLX then loads it instead of compiling, and launches it as always.
 * Its machine code is MLX's compile of the kernel, instruction for instruction
 * (tools/cuda/sass_compare.py), and the entry stays for later processes. It is opt-in until a GPU
 * run has checked that MLX takes the entries (l3_run.sh's tests and startup steps). Where NVRTC or
 * the CUDA headers cannot be found, or a compile or a write fails, MLX compiles the kernel as
 * without the variable (one warning on stderr). Kernels whose spec says self_compile = false (L1
 * ports of mlx-lm's kernels) are always MLX's compile.
 *
 * The entries are a cache of compiled-launch descriptions, like MLX's own kernel cache: made under
 * a mutex, never changed or removed after. Calls with an init value, verbose output or an explicit
 * stream go straight to MLX's function. */
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <mlx/array.h>
#include <mlx/fast.h>
#include <mlx/primitives.h>

#include "mlxrt/kernels/cuda/kernel_launch.h"

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

/** MLXRT_CUDA_SELF_COMPILE=1. */
bool self_compile_opted_in();

/** MLXRT_CUDA_LOG_KERNELS=1: each launch a CachedKernel has not made before is one line on stderr
 * (the time, the kernel, its template arguments, grid and input shapes). MLX compiles each new
 * template instance at its first evaluation (about a second, in every process), so the lines say
 * which shapes a warm-up missed when a request stalls. */
bool log_new_launches_opted_in();

class CachedKernel {
 public:
  explicit CachedKernel(KernelSpec spec);

  /** As MLX's CustomKernelFunction. */
  std::vector<mx::array> operator()(const std::vector<mx::array>& inputs, const std::vector<mx::Shape>& output_shapes,
                                    const std::vector<mx::Dtype>& output_dtypes, std::tuple<int, int, int> grid,
                                    std::tuple<int, int, int> threadgroup,
                                    const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args,
                                    std::optional<float> init_value, bool verbose, mx::StreamOrDevice s) const;

  /** A launch of this kernel (launch.spec names the same kernel) on the default stream. */
  std::vector<mx::array> operator()(const KernelLaunch& launch) const;

  /** The primitive a launch's outputs come from (made and kept as operator() makes them). A caller
   * that makes one launch again and again, but for its inputs' arrays, keeps it and makes each
   * node's outputs with mx::array::make_arrays, without building the launch every time. */
  std::shared_ptr<mx::Primitive> primitive(const KernelLaunch& launch) const;

  /** Whether launches take the self-compiled route (opted in, allowed by the spec, NVRTC found). */
  bool self_compiled() const;

 private:
  // Compiles the kernel of a new MLX primitive and writes it where MLX will look for it
  // (mlx_kernel_cache.h), unless an entry is there already.
  void prime_mlx_cache(const mx::Primitive& primitive, const std::vector<mx::array>& inputs,
                       const std::vector<mx::Dtype>& output_dtypes,
                       const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args) const;

  // MLXRT_CUDA_LOG_KERNELS's line for a launch made now.
  void log_new_launch(const std::vector<mx::array>& inputs,
                      const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args,
                      std::tuple<int, int, int> grid) const;

  KernelSpec spec_;
  mx::fast::CustomKernelFunction kernel_;
  mutable std::mutex mutex_;
  mutable std::map<std::vector<int64_t>, std::shared_ptr<mx::Primitive>> launches_;
  mutable std::set<std::string> primed_;  // MLX module names written or found
};

}  // namespace mlxrt::kernels::cuda
