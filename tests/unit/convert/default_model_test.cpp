// Where the default model is looked for, and the errors when it cannot be had.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "mlxrt/convert/default_model.h"
#include "mlxrt/util/errors.h"

using namespace mlxrt::convert;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  auto dir = fs::path(::testing::TempDir()) / ("default_model_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

DefaultModelSources sources(std::string xdg, std::string home = "", std::string gguf_override = "",
                            std::string built_in = "", std::string model_override = "") {
  DefaultModelSources s;
  s.xdg_cache_home = std::move(xdg);
  s.home = std::move(home);
  s.gguf_override = std::move(gguf_override);
  s.built_in_gguf = std::move(built_in);
  s.model_override = std::move(model_override);
  return s;
}

TEST(DefaultModel, CacheFolderFollowsXdgThenHome) {
  auto s = sources("/xdg", "/home/u");
  EXPECT_EQ(default_model_cache_dir(s), fs::path("/xdg/mlxrt/models/SmolLM2-135M-Instruct"));
  s.xdg_cache_home = "relative/is/ignored";
  EXPECT_EQ(default_model_cache_dir(s), fs::path("/home/u/.cache/mlxrt/models/SmolLM2-135M-Instruct"));
  s.xdg_cache_home.clear();
  EXPECT_EQ(default_model_cache_dir(s), fs::path("/home/u/.cache/mlxrt/models/SmolLM2-135M-Instruct"));
  s.home.clear();
  EXPECT_THROW(default_model_cache_dir(s), mlxrt::ConfigError);
}

TEST(DefaultModel, GgufOverrideWinsOverTheBuiltInPath) {
  auto s = sources("", "", "", "/built/in.gguf");
  EXPECT_EQ(default_model_gguf(s), fs::path("/built/in.gguf"));
  s.gguf_override = "/other.gguf";
  EXPECT_EQ(default_model_gguf(s), fs::path("/other.gguf"));
}

TEST(DefaultModel, OverrideAndConvertedFolderAreUsedAsTheyAre) {
  std::ostringstream log;
  EXPECT_EQ(ensure_default_model(sources("", "", "", "", "/some/model"), log), fs::path("/some/model"));
  auto cache = fresh_dir("converted");
  auto folder = cache / "mlxrt" / "models" / kDefaultModelName;
  fs::create_directories(folder);
  std::ofstream(folder / "config.json") << "{}";
  EXPECT_EQ(ensure_default_model(sources(cache.string(), "", "", "/missing.gguf"), log), folder);
  EXPECT_EQ(log.str(), "");  // nothing converted, nothing said
}

TEST(DefaultModel, MissingGgufNamesTheWaysOut) {
  std::ostringstream log;
  auto cache = fresh_dir("missing");
  try {
    ensure_default_model(sources(cache.string(), "", "/missing.gguf"), log);
    FAIL() << "expected ConfigError";
  } catch (const mlxrt::ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("/missing.gguf is missing"), std::string::npos) << m;
    EXPECT_NE(m.find("MLXRT_DEFAULT_MODEL"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(cache / "mlxrt"));
}

TEST(DefaultModel, HelpNamesTheModelAndTheOverride) {
  auto help = default_model_help();
  EXPECT_NE(help.find(kDefaultModelName), std::string::npos);
  EXPECT_NE(help.find("MLXRT_DEFAULT_MODEL"), std::string::npos);
}

}  // namespace
