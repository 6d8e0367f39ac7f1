#pragma once
/** mlxrt's CUDA kernels run on the CPU, for tests: the program mlxrt would compile for a launch
 * (kernel_source.h's kernel_function_source, the same text NVRTC gets, behind device_shim.h instead
 * of the CUDA prelude), compiled by the host's C++ compiler into a shared library, loaded, and run
 * by the SIMT runtime (simt.h) on MLX arrays in CPU memory.
 *
 * emulated_launch takes what CachedKernel (and MLX's cuda_kernel) take, so a test calls a kernel
 * as the model's launch code does: grid in threads, threadgroup, template arguments, output shapes
 * and types; `resident`: the blocks run all at once (simt.h), for kernels whose blocks wait on each
 * other. Libraries are kept by the hash of their text in MLXRT_EMU_CACHE_DIR (the build folder:
 * a later run loads them) and loaded once per process. */
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <mlx/array.h>
#include <mlx/fast.h>

#include "mlxrt/kernels/cuda/kernel_source.h"

namespace mlxrt::cuda_emu {

namespace mx = mlx::core;

/** The launch's outputs (row-contiguous, on the CPU). Inputs are evaluated first, and copied
 * row-contiguous where the spec asks it and they are not, as MLX does. Throws std::runtime_error
 * for a program the compiler rejects (its messages included) and SimtError for a kernel bug the
 * runtime caught. */
std::vector<mx::array> emulated_launch(const kernels::cuda::KernelSpec& spec, const std::vector<mx::array>& inputs,
                                       const std::vector<mx::Shape>& output_shapes,
                                       const std::vector<mx::Dtype>& output_dtypes, std::tuple<int, int, int> grid,
                                       std::tuple<int, int, int> threadgroup,
                                       const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args,
                                       bool resident = false);

/** A program's text as emulated_launch compiles it: kernel_function_source and an entry taking the
 * parameters as a pointer array (for tests of the harness itself). */
std::string emulated_program_text(const kernels::cuda::KernelSpec& spec, const std::vector<mx::Dtype>& input_types,
                                  const std::vector<mx::Shape>& input_shapes,
                                  const std::vector<mx::Dtype>& output_types,
                                  const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args);

}  // namespace mlxrt::cuda_emu
