#pragma once
/** Entries of MLX's on-disk kernel cache, written by mlxrt for its own kernels (cached_kernel.h).
 *
 * MLX's CUDA backend looks every run-time module up on disk before it compiles it
 * (jit_module.cpp: read_cached_ptx), custom kernels included, but writes only its own: a custom
 * kernel is compiled again by every process. mlxrt compiles its kernels itself, in a fraction of the
 * time (nvrtc.h), and leaves the result where MLX looks, under the name MLX will look for. MLX then
 * loads it and launches it as it launches its own compile. These functions are MLX 0.32's naming
 * and file format (custom_kernel.cpp, jit_module.cpp): a module `<kernel name>_<hex of
 * std::hash(source)>` is `<folder>/<module>.ptx` (the image: PTX text or a cubin) beside
 * `<module>.txt` (lines of `<name>\t<symbol>`), the path cut into folders of 245 characters when
 * longer. A name that does not match MLX's is only a miss: MLX compiles the kernel as before. */
#include <filesystem>
#include <string>

namespace mlxrt::kernels::cuda {

/** MLX's folder: MLX_PTX_CACHE_DIR (made absolute), else <temp dir>/mlx/<mlx_version>/ptx. */
std::filesystem::path mlx_ptx_cache_dir(const std::string& mlx_version);

/** MLX's module name for a custom kernel whose primitive is named `name` with source text `source`. */
std::string mlx_custom_kernel_module(const std::string& name, const std::string& source);

/** Where MLX reads `module`'s image. */
std::filesystem::path mlx_module_path(const std::filesystem::path& dir, const std::string& module);

/** Writes `module`'s entry: the .txt (MLX's kernel name `kernel`, e.g. "mlx::core::cu::<name>", to
 * the image's `symbol`), then the image, each under a temporary name renamed into place, the image
 * last (MLX reads the .txt once it finds the image). Throws std::system_error or
 * std::runtime_error naming the file. */
void write_mlx_module(const std::filesystem::path& dir, const std::string& module, const std::string& kernel,
                      const std::string& symbol, const std::string& image);

}  // namespace mlxrt::kernels::cuda
