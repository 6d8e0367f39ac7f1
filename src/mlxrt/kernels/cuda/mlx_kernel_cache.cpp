// Entries of MLX's on-disk kernel cache. Why and what: mlx_kernel_cache.h.
#include "mlxrt/kernels/cuda/mlx_kernel_cache.h"

#include <cstdlib>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "mlxrt/util/durable_file.h"

namespace mlxrt::kernels::cuda {

namespace fs = std::filesystem;

namespace {

// jit_module.cpp's max_file_name_length.
constexpr size_t kMaxFileName = 245;

void write_file(const fs::path& target, const std::string& bytes) {
  fs::create_directories(target.parent_path());
  // The partial file named after a hash of the target's name: a module's file name may take up to
  // 249 bytes (kMaxFileName and ".ptx"), and util::partial_path's prefix and suffix around it would
  // pass the 255 a file system allows.
  const auto partial = util::partial_path(
      target.parent_path() / fmt::format("{:x}", std::hash<std::string>{}(target.filename().string())));
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(partial, ec);
      throw std::runtime_error("cannot write " + partial.string());
    }
  }
  util::durable_rename(partial, target);
}

}  // namespace

fs::path mlx_ptx_cache_dir(const std::string& mlx_version) {
  if (const char* set = std::getenv("MLX_PTX_CACHE_DIR"); set && *set) return fs::absolute(set);
  return fs::temp_directory_path() / "mlx" / mlx_version / "ptx";
}

std::string mlx_custom_kernel_module(const std::string& name, const std::string& source) {
  return fmt::format("{}_{:x}", name, std::hash<std::string>{}(source));
}

fs::path mlx_module_path(const fs::path& dir, const std::string& module) {
  if (module.size() <= kMaxFileName) return dir / (module + ".ptx");
  fs::path path = dir;
  size_t offset = 0;
  for (; module.size() - offset > kMaxFileName; offset += kMaxFileName) path /= module.substr(offset, kMaxFileName);
  return path / (module.substr(offset) + ".ptx");
}

void write_mlx_module(const fs::path& dir, const std::string& module, const std::string& kernel,
                      const std::string& symbol, const std::string& image) {
  auto path = mlx_module_path(dir, module);
  auto txt = path;
  txt.replace_extension(".txt");
  write_file(txt, kernel + "\t" + symbol + "\n");
  write_file(path, image);
}

}  // namespace mlxrt::kernels::cuda
