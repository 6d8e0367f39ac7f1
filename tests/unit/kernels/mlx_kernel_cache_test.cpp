// Entries of MLX's on-disk kernel cache as mlxrt writes them (kernels/cuda/mlx_kernel_cache.h): MLX
// 0.32's folder, module name and file layout (jit_module.cpp's get_ptx_path and read_cached_ptx).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "mlxrt/kernels/cuda/mlx_kernel_cache.h"

namespace fs = std::filesystem;
using namespace mlxrt::kernels::cuda;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct TempDir {
  fs::path path = fs::temp_directory_path() /
                  fmt::format("mlxrt_mlx_cache_{}_{}", ::getpid(),
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

TEST(MlxKernelCache, FolderIsMlxsOwn) {
  const char* before = std::getenv("MLX_PTX_CACHE_DIR");
  const std::string saved = before ? before : "";
  setenv("MLX_PTX_CACHE_DIR", "/some/ptx", 1);
  EXPECT_EQ(mlx_ptx_cache_dir("0.32.4"), fs::path("/some/ptx"));
  unsetenv("MLX_PTX_CACHE_DIR");
  EXPECT_EQ(mlx_ptx_cache_dir("0.32.4"), fs::temp_directory_path() / "mlx" / "0.32.4" / "ptx");
  if (before) setenv("MLX_PTX_CACHE_DIR", saved.c_str(), 1);
}

TEST(MlxKernelCache, ModuleIsTheNameAndTheSourcesHashInHex) {
  const std::string source = "__global__ void k() {}";
  EXPECT_EQ(mlx_custom_kernel_module("custom_kernel_mlxrt_x_1_t_bfloat16", source),
            fmt::format("custom_kernel_mlxrt_x_1_t_bfloat16_{:x}", std::hash<std::string>{}(source)));
  EXPECT_NE(mlx_custom_kernel_module("n", "a"), mlx_custom_kernel_module("n", "b"));
}

TEST(MlxKernelCache, LongModulesAreCutIntoFolders) {
  EXPECT_EQ(mlx_module_path("/c", "short_1f"), fs::path("/c/short_1f.ptx"));
  const std::string module(600, 'm');
  EXPECT_EQ(mlx_module_path("/c", module),
            fs::path("/c") / std::string(245, 'm') / std::string(245, 'm') / (std::string(110, 'm') + ".ptx"));
  EXPECT_EQ(mlx_module_path("/c", std::string(245, 'm')), fs::path("/c") / (std::string(245, 'm') + ".ptx"));
}

TEST(MlxKernelCache, EntryIsTheImageAndItsKernelLine) {
  TempDir tmp;
  const std::string image("\x7f" "ELF\0binary", 10);
  write_mlx_module(tmp.path, "custom_kernel_mlxrt_k_4_abc", "mlx::core::cu::custom_kernel_mlxrt_k_4", "mlxrt_k", image);
  EXPECT_EQ(read(tmp.path / "custom_kernel_mlxrt_k_4_abc.ptx"), image);
  EXPECT_EQ(read(tmp.path / "custom_kernel_mlxrt_k_4_abc.txt"), "mlx::core::cu::custom_kernel_mlxrt_k_4\tmlxrt_k\n");
  // Nothing else is left in the folder (no partial files).
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(tmp.path)) ++files;
  EXPECT_EQ(files, 2);
  // A long module's .txt sits beside its image in the last folder.
  const std::string module(300, 'q');
  write_mlx_module(tmp.path, module, "mlx::core::cu::q", "q", image);
  auto txt = mlx_module_path(tmp.path, module);
  txt.replace_extension(".txt");
  EXPECT_EQ(read(txt), "mlx::core::cu::q\tq\n");
}

TEST(MlxKernelCache, ModulesOfTheLongestFileNamesAreWritten) {
  // A module of 245 bytes is a file of 249 (".ptx"); its partial file must still be a name the file
  // system takes (at most 255 bytes), and a module cut into folders ends in such a name too.
  TempDir tmp;
  for (const size_t n : {240u, 245u, 490u}) {
    const std::string module(n, 'z');
    write_mlx_module(tmp.path, module, "mlx::core::cu::z", "z", "image");
    EXPECT_EQ(read(mlx_module_path(tmp.path, module)), "image") << n;
  }
  for (const auto& e : fs::recursive_directory_iterator(tmp.path))
    EXPECT_EQ(e.path().filename().string().find("partial"), std::string::npos) << e.path();
}

TEST(MlxKernelCache, AFolderThatCannotBeMadeIsAnError) {
  TempDir tmp;
  fs::create_directories(tmp.path);
  { std::ofstream(tmp.path / "file") << "a file where the folder would be"; }
  EXPECT_ANY_THROW(write_mlx_module(tmp.path / "file" / "ptx", "m", "k", "s", "image"));
}

}  // namespace
