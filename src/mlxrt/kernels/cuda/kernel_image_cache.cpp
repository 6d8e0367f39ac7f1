// Self-compiled kernels' machine code on disk. Why and how: kernel_image_cache.h.
#include "mlxrt/kernels/cuda/kernel_image_cache.h"

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <system_error>

#include <fmt/format.h>

#include "mlxrt/util/durable_file.h"
#include "mlxrt/util/kernel_cache.h"

namespace mlxrt::kernels::cuda {

namespace fs = std::filesystem;

namespace {

// A file: this line, then the three parts' sizes on one line, then the parts themselves.
constexpr const char* kMagic = "mlxrt kernel image 1\n";

}  // namespace

fs::path KernelImageCache::file_for(const std::string& text, const std::string& compiler_key) const {
  const size_t h = std::hash<std::string>{}(compiler_key + '\0' + text);
  return dir_ / fmt::format("{:016x}.bin", h);
}

std::optional<std::string> KernelImageCache::load(const std::string& text, const std::string& compiler_key) const {
  if (dir_.empty()) return std::nullopt;
  std::ifstream in(file_for(text, compiler_key), std::ios::binary);
  if (!in) return std::nullopt;
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string magic = kMagic;
  if (data.compare(0, magic.size(), magic) != 0) return std::nullopt;
  const size_t line_end = data.find('\n', magic.size());
  if (line_end == std::string::npos) return std::nullopt;
  std::istringstream sizes(data.substr(magic.size(), line_end - magic.size()));
  size_t key_size = 0, text_size = 0, image_size = 0;
  if (!(sizes >> key_size >> text_size >> image_size)) return std::nullopt;
  const size_t start = line_end + 1;
  if (data.size() != start + key_size + text_size + image_size || key_size != compiler_key.size() ||
      text_size != text.size())
    return std::nullopt;
  if (data.compare(start, key_size, compiler_key) != 0 || data.compare(start + key_size, text_size, text) != 0)
    return std::nullopt;
  return data.substr(start + key_size + text_size);
}

void KernelImageCache::store(const std::string& text, const std::string& compiler_key,
                             const std::string& image) const {
  if (dir_.empty()) return;
  try {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    const auto target = file_for(text, compiler_key);
    const auto partial = util::partial_path(target);
    {
      std::ofstream out(partial, std::ios::binary | std::ios::trunc);
      if (!out) return;
      out << kMagic << compiler_key.size() << ' ' << text.size() << ' ' << image.size() << '\n';
      out.write(compiler_key.data(), static_cast<std::streamsize>(compiler_key.size()));
      out.write(text.data(), static_cast<std::streamsize>(text.size()));
      out.write(image.data(), static_cast<std::streamsize>(image.size()));
      if (!out) {
        out.close();
        fs::remove(partial, ec);
        return;
      }
    }
    util::durable_rename(partial, target);
  } catch (const std::exception&) {
    // No cache this time: the kernel was compiled, and will be again.
  }
}

fs::path default_image_cache_dir(const std::string& mlx_version) {
  if (const char* set = std::getenv("MLX_PTX_CACHE_DIR"); set && *set) return fs::path(set) / "mlxrt";
  const auto dir = default_kernel_cache_dir(mlx_version);
  return dir.empty() ? fs::path() : fs::path(dir) / "mlxrt";
}

}  // namespace mlxrt::kernels::cuda
