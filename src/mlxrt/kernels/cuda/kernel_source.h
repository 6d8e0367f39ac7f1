#pragma once
/** One of mlxrt's CUDA kernels as text, and the whole program mlxrt compiles from it itself.
 *
 * A KernelSpec holds what mx::fast::cuda_kernel takes: a name, the input and output names, the
 * body, the device code before it. MLX's function wraps the body in a __global__ function whose
 * parameters are the inputs (typed by their dtypes, each followed by a `__grid_constant__ Shape
 * <input>_shape` where the body reads it), then the outputs, with one `constexpr` / `using` line per
 * template argument, behind its own prelude (its device utilities and cooperative groups).
 * self_contained_source() writes the same kernel, with the same parameters in the same order, behind
 * a small prelude of ours instead (nvrtc.h says why), as an extern "C" function named spec.name.
 * Its machine code is MLX's compile of the kernel, instruction for instruction
 * (tools/cuda/sass_compare.py), so MLX can launch it as its own (cached_kernel.h). */
#include <string>
#include <utility>
#include <vector>

#include <mlx/array.h>
#include <mlx/fast.h>

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

struct KernelSpec {
  std::string name;
  std::vector<std::string> input_names;
  std::vector<std::string> output_names;
  std::string source;  // the kernel's body
  std::string header;  // device code before the kernel
  bool ensure_row_contiguous = true;
  int shared_memory = 0;
  /** False for kernels whose bytes must be MLX's own compile of mlx-lm's text (L1): those always go
   * through mx::fast::cuda_kernel. */
  bool self_compile = true;
  /** The kernel's blocks wait on each other (a grid-wide barrier): its launches keep the grid to
   * what the GPU holds at once, and a CPU emulation must run the blocks together. */
  bool grid_barrier = false;
};

/** For each input: whether the body reads `<name>_shape`. */
std::vector<bool> shapes_read(const KernelSpec& spec);

/** The CUDA type of a dtype in a kernel's signature (`__nv_bfloat16`, `float`, `uint32_t`, ...).
 * Throws std::invalid_argument for a type the kernels do not take (complex). */
std::string cuda_type_name(mx::Dtype t);

/** One parameter of a launch's kernel function, in MLX's order: an input's or output's pointer
 * (`type` "const __nv_bfloat16*", "float*", ...), or an input's Shape passed by value (`shape`,
 * `type` "mlxrt_shape"). */
struct KernelParameter {
  std::string type;
  std::string name;
  bool shape = false;
};

/** The parameters of a launch's kernel function (arguments as self_contained_source says). */
std::vector<KernelParameter> kernel_parameters(const KernelSpec& spec, const std::vector<mx::Dtype>& input_types,
                                               const std::vector<mx::Shape>& input_shapes,
                                               const std::vector<mx::Dtype>& output_types);

/** The program after its prelude: the spec's device code, then the kernel as
 * `extern "C" __global__ void <spec.name>(...)`, its template arguments as constants at the top of
 * its body. Needs the CUDA types, the fixed-width integers and `mlxrt_shape` declared before it
 * (self_contained_source's prelude; a CPU test harness has its own). Arguments and errors as
 * self_contained_source. */
std::string kernel_function_source(const KernelSpec& spec, const std::vector<mx::Dtype>& input_types,
                                   const std::vector<mx::Shape>& input_shapes,
                                   const std::vector<mx::Dtype>& output_types,
                                   const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args);

/** The whole program for one launch: the kernel as `extern "C" __global__ void <spec.name>(...)`.
 * `input_shapes[i]` is used only for whether it has dimensions (MLX passes no Shape for a scalar).
 * Throws std::invalid_argument for lists of the wrong length, and for a body that reads an input's
 * strides or ndim (MLX's parameters ours do not write). */
std::string self_contained_source(const KernelSpec& spec, const std::vector<mx::Dtype>& input_types,
                                  const std::vector<mx::Shape>& input_shapes,
                                  const std::vector<mx::Dtype>& output_types,
                                  const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args);

}  // namespace mlxrt::kernels::cuda
