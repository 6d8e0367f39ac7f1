#pragma once
/** Where MLX's CUDA backend keeps the kernels it compiles at run time (NVRTC): fused elementwise
 * kernels, the quantized matmuls, gathers. MLX looks each one up on disk before compiling it, in
 * MLX_PTX_CACHE_DIR, by default <temp dir>/mlx/<version>/ptx: a reboot or a fresh container empties
 * that, and the next run compiles them all again (10-40 s before the first token on an H200). */
#include <string>

namespace mlxrt {

/** $XDG_CACHE_HOME/mlxrt/ptx/<mlx_version>, else $HOME/.cache/mlxrt/ptx/<mlx_version>; empty when
 * neither variable is set. */
std::string default_kernel_cache_dir(const std::string& mlx_version);

/** Unless MLX_PTX_CACHE_DIR is set already, creates default_kernel_cache_dir(mlx_version) and sets
 * MLX_PTX_CACHE_DIR to it (MLX reads it once, at its first run-time compile, so call this before
 * any). Returns the directory MLX will use, or "" for MLX's own default (nothing to set, or the
 * directory could not be made). */
std::string configure_kernel_cache(const std::string& mlx_version);

}  // namespace mlxrt
