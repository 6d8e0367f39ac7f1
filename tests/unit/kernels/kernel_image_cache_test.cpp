// The self-compiled kernels' images on disk (kernels/cuda/kernel_image_cache.h): what is stored comes
// back only for the same program and compiler; a damaged or foreign file is a miss; a folder that
// cannot be written is no cache, not an error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "mlxrt/kernels/cuda/kernel_image_cache.h"

namespace fs = std::filesystem;
using mlxrt::kernels::cuda::KernelImageCache;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("mlxrt_image_cache_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

const std::string kText = "extern \"C\" __global__ void k(float* y) { y[0] = 1.0f; }\n";
const std::string kKey = "nvrtc 13.0 --gpu-architecture=sm_90a";
const std::string kImage = std::string("\x7f" "ELF\0\1\2 binary \0 bytes", 20);

fs::path only_file(const fs::path& dir) {
  fs::path found;
  for (const auto& e : fs::directory_iterator(dir)) found = e.path();
  return found;
}

TEST(KernelImageCache, StoredImageComesBackForTheSameProgramAndCompiler) {
  TempDir tmp;
  const KernelImageCache cache(tmp.path / "mlxrt");
  EXPECT_FALSE(cache.load(kText, kKey));
  cache.store(kText, kKey, kImage);
  const auto got = cache.load(kText, kKey);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, kImage);  // binary bytes, zeros included
  EXPECT_FALSE(cache.load(kText + " ", kKey)) << "another program";
  EXPECT_FALSE(cache.load(kText, "nvrtc 13.0 --gpu-architecture=sm_100a")) << "another architecture";
  // A second store (another process compiled it too) replaces it whole.
  cache.store(kText, kKey, kImage + "x");
  EXPECT_EQ(*cache.load(kText, kKey), kImage + "x");
}

TEST(KernelImageCache, DamagedOrForeignFilesAreMisses) {
  TempDir tmp;
  const KernelImageCache cache(tmp.path);
  cache.store(kText, kKey, kImage);
  const auto file = only_file(tmp.path);
  ASSERT_FALSE(file.empty());
  const auto size = fs::file_size(file);
  fs::resize_file(file, size - 3);  // a writer killed half way through (it would not be renamed, but)
  EXPECT_FALSE(cache.load(kText, kKey));
  { std::ofstream(file, std::ios::binary | std::ios::trunc) << "not an image file\n"; }
  EXPECT_FALSE(cache.load(kText, kKey));
  // The right sizes, another program in the file (what a hash collision would leave).
  {
    std::string other = kText;
    other[0] = 'E';
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << "mlxrt kernel image 1\n" << kKey.size() << ' ' << other.size() << ' ' << kImage.size() << '\n'
        << kKey << other << kImage;
  }
  EXPECT_FALSE(cache.load(kText, kKey));
}

TEST(KernelImageCache, NoFolderOrAnUnwritableOneMeansNoCache) {
  const KernelImageCache none{fs::path()};
  none.store(kText, kKey, kImage);
  EXPECT_FALSE(none.load(kText, kKey));
  TempDir tmp;
  fs::create_directories(tmp.path);
  { std::ofstream(tmp.path / "file") << "a file where the folder would be"; }
  const KernelImageCache blocked(tmp.path / "file" / "mlxrt");
  EXPECT_NO_THROW(blocked.store(kText, kKey, kImage));
  EXPECT_FALSE(blocked.load(kText, kKey));
}

TEST(KernelImageCache, FolderBesideMlxsCompiledKernels) {
  const char* before = std::getenv("MLX_PTX_CACHE_DIR");
  const std::string saved = before ? before : "";
  setenv("MLX_PTX_CACHE_DIR", "/some/ptx", 1);
  EXPECT_EQ(mlxrt::kernels::cuda::default_image_cache_dir("0.32.4"), fs::path("/some/ptx/mlxrt"));
  unsetenv("MLX_PTX_CACHE_DIR");
  const auto dir = mlxrt::kernels::cuda::default_image_cache_dir("0.32.4");
  if (!dir.empty()) {
    EXPECT_EQ(dir.filename(), "mlxrt");
    EXPECT_EQ(dir.parent_path().filename(), "0.32.4");
  }
  if (before) setenv("MLX_PTX_CACHE_DIR", saved.c_str(), 1);
}

}  // namespace
