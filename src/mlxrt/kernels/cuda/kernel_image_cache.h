#pragma once
/** The machine code of mlxrt's self-compiled CUDA kernels (cached_kernel.h), kept on disk between
 * processes, in a folder beside MLX's own compiled kernels (MLX_PTX_CACHE_DIR, which the CLI points
 * at $XDG_CACHE_HOME/mlxrt/ptx/<mlx version>): a second process loads each kernel instead of
 * compiling it again.
 *
 * A file holds the compiler's key (NVRTC's version and options: the architecture is among them),
 * the whole program text and the image, and is named after a hash of the first two; a load returns
 * the image only when both are equal to the ones asked for, so a hash collision, a truncated file or
 * another compiler's entry reads as a miss. Writes are atomic (a partial file renamed into place);
 * a folder that cannot be written only means no cache. */
#include <filesystem>
#include <optional>
#include <string>

namespace mlxrt::kernels::cuda {

class KernelImageCache {
 public:
  /** `dir` empty: nothing is kept. */
  explicit KernelImageCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

  std::optional<std::string> load(const std::string& text, const std::string& compiler_key) const;
  /** Best effort: errors are swallowed (the kernel is compiled again next time). */
  void store(const std::string& text, const std::string& compiler_key, const std::string& image) const;

  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path file_for(const std::string& text, const std::string& compiler_key) const;
  std::filesystem::path dir_;
};

/** $MLX_PTX_CACHE_DIR/mlxrt, else the CLI's default kernel folder for this MLX version + /mlxrt;
 * empty when neither can be named (no HOME). */
std::filesystem::path default_image_cache_dir(const std::string& mlx_version);

}  // namespace mlxrt::kernels::cuda
