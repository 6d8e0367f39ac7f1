#include "mlxrt/util/kernel_cache.h"
#include "mlxrt/util/cuda_graphs.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <gtest/gtest.h>

namespace fs = std::filesystem;

namespace {

/** Sets (or unsets) an environment variable for one test and puts the old value back. */
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

fs::path temp_root(const char* name) {
  auto dir = fs::temp_directory_path() /
             (std::string("mlxrt-kernel-cache-") + name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  return dir;
}

}  // namespace

TEST(KernelCache, DefaultDirFollowsXdgThenHome) {
  ScopedEnv xdg("XDG_CACHE_HOME", "/x/cache");
  ScopedEnv home("HOME", "/home/u");
  EXPECT_EQ(mlxrt::default_kernel_cache_dir("0.32.4"), "/x/cache/mlxrt/ptx/0.32.4");
  ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
  EXPECT_EQ(mlxrt::default_kernel_cache_dir("0.32.4"), "/home/u/.cache/mlxrt/ptx/0.32.4");
  ScopedEnv no_home("HOME", nullptr);
  EXPECT_EQ(mlxrt::default_kernel_cache_dir("0.32.4"), "");
}

TEST(KernelCache, CreatesTheDirectoryAndPointsMlxAtIt) {
  auto root = temp_root("create");
  ScopedEnv xdg("XDG_CACHE_HOME", root.c_str());
  ScopedEnv unset("MLX_PTX_CACHE_DIR", nullptr);
  const std::string dir = mlxrt::configure_kernel_cache("0.32.4");
  EXPECT_EQ(dir, (root / "mlxrt" / "ptx" / "0.32.4").string());
  EXPECT_TRUE(fs::is_directory(dir));
  ASSERT_NE(std::getenv("MLX_PTX_CACHE_DIR"), nullptr);
  EXPECT_EQ(std::string(std::getenv("MLX_PTX_CACHE_DIR")), dir);
  // A second call (another verb in the same process) keeps it.
  EXPECT_EQ(mlxrt::configure_kernel_cache("0.32.4"), dir);
  fs::remove_all(root);
}

TEST(KernelCache, AUserSettingIsLeftAlone) {
  auto root = temp_root("user");
  ScopedEnv xdg("XDG_CACHE_HOME", root.c_str());
  ScopedEnv user("MLX_PTX_CACHE_DIR", "/somewhere/else");
  EXPECT_EQ(mlxrt::configure_kernel_cache("0.32.4"), "/somewhere/else");
  EXPECT_EQ(std::string(std::getenv("MLX_PTX_CACHE_DIR")), "/somewhere/else");
  EXPECT_FALSE(fs::exists(root));
}

TEST(KernelCache, AnUncreatableDirectoryLeavesMlxItsDefault) {
  auto root = temp_root("file");
  fs::create_directories(root.parent_path());
  // A file where the folder would go.
  FILE* f = std::fopen(root.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  ScopedEnv xdg("XDG_CACHE_HOME", root.c_str());
  ScopedEnv unset("MLX_PTX_CACHE_DIR", nullptr);
  EXPECT_EQ(mlxrt::configure_kernel_cache("0.32.4"), "");
  EXPECT_EQ(std::getenv("MLX_PTX_CACHE_DIR"), nullptr);
  fs::remove(root);
}

// The batched verbs' CUDA-graph choice (cuda_graphs.h), another MLX environment setting made
// before any GPU work.
TEST(CudaGraphs, OffUnlessTheUserChose) {
  {
    ScopedEnv unset("MLX_USE_CUDA_GRAPHS", nullptr);
    EXPECT_FALSE(mlxrt::prefer_direct_kernel_launches());
    ASSERT_NE(std::getenv("MLX_USE_CUDA_GRAPHS"), nullptr);
    EXPECT_EQ(std::string(std::getenv("MLX_USE_CUDA_GRAPHS")), "0");
  }
  {
    ScopedEnv on("MLX_USE_CUDA_GRAPHS", "1");
    EXPECT_TRUE(mlxrt::prefer_direct_kernel_launches());
    EXPECT_EQ(std::string(std::getenv("MLX_USE_CUDA_GRAPHS")), "1");
  }
  {
    // Read as MLX reads it: set means atoi of the value.
    ScopedEnv empty("MLX_USE_CUDA_GRAPHS", "");
    EXPECT_FALSE(mlxrt::prefer_direct_kernel_launches());
    EXPECT_EQ(std::string(std::getenv("MLX_USE_CUDA_GRAPHS")), "");
  }
}
