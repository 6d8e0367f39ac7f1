#include "mlxrt/util/kernel_cache.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace mlxrt {

std::string default_kernel_cache_dir(const std::string& mlx_version) {
  namespace fs = std::filesystem;
  fs::path root;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    root = xdg;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    root = fs::path(home) / ".cache";
  } else {
    return "";
  }
  // One folder per MLX version: a kernel's file is named after its module, not its source.
  return (root / "mlxrt" / "ptx" / mlx_version).string();
}

std::string configure_kernel_cache(const std::string& mlx_version) {
  if (const char* set = std::getenv("MLX_PTX_CACHE_DIR"); set && *set) return set;
  const std::string dir = default_kernel_cache_dir(mlx_version);
  if (dir.empty()) return "";
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error || !std::filesystem::is_directory(dir)) return "";
  setenv("MLX_PTX_CACHE_DIR", dir.c_str(), 0);
  return dir;
}

}  // namespace mlxrt
