// The Hugging Face cache helpers: repo id rules (huggingface_hub's validate_repo_id), the cache
// directory's settings, and the formats mlx_lm.manage prints.
#include <gtest/gtest.h>

#include <cstdlib>

#include "mlxrt/io/hf_cache.h"
#include "mlxrt/io/hf_cache_scan.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::io {
namespace {

TEST(HfRepoRef, ParsesIdAndRevision) {
  auto r = parse_hf_repo_ref("mlx-community/SmolLM2-135M-Instruct", "--model");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->repo_id, "mlx-community/SmolLM2-135M-Instruct");
  EXPECT_EQ(r->revision, "main");
  r = parse_hf_repo_ref("org/name@refs/pr/1", "--model");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->repo_id, "org/name");
  EXPECT_EQ(r->revision, "refs/pr/1");
  r = parse_hf_repo_ref("gpt2", "--model");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->repo_id, "gpt2");
}

TEST(HfRepoRef, RejectsWhatValidateRepoIdRejects) {
  for (const char* bad : {"", "a/b/c", "org--x/name", "org/na..me", "org/name.git", "-org/name", "org/name-",
                          ".hidden/x", "org/", "/abs", "../x", "caf\xc3\xa9/x", "org/na me"})
    EXPECT_FALSE(parse_hf_repo_ref(bad, "--model")) << bad;
  EXPECT_FALSE(parse_hf_repo_ref(std::string(97, 'a'), "--model"));
  EXPECT_TRUE(parse_hf_repo_ref(std::string(96, 'a'), "--model"));
}

TEST(HfRepoRef, RevisionsThatLeaveRefsAreRefused) {
  for (const char* bad : {"org/name@", "org/name@..", "org/name@../x", "org/name@a/../../b", "org/name@/etc",
                          "org/name@a//b", "org/name@a\\b", "org/name@./a"})
    EXPECT_THROW(parse_hf_repo_ref(bad, "--model"), UsageError) << bad;
}

TEST(HfRepoRef, FolderName) {
  EXPECT_EQ(hf_repo_folder_name("org/name"), "models--org--name");
  EXPECT_EQ(hf_repo_folder_name("gpt2"), "models--gpt2");
}

class CacheEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* k : kVars) {
      const char* v = std::getenv(k);
      saved_.emplace_back(k, v ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(k);
    }
  }
  void TearDown() override {
    for (const auto& [k, v] : saved_) {
      if (v) setenv(k, v->c_str(), 1);
      else unsetenv(k);
    }
  }
  static constexpr const char* kVars[] = {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME",
                                          "HOME", "MLXRT_TEST_VAR"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST_F(CacheEnv, SettingsInHuggingfaceHubsOrder) {
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(hf_hub_cache_dir().path, "/home/u/.cache/huggingface/hub");
  setenv("XDG_CACHE_HOME", "/x", 1);
  EXPECT_EQ(hf_hub_cache_dir().path, "/x/huggingface/hub");
  setenv("HF_HOME", "~/hf", 1);
  EXPECT_EQ(hf_hub_cache_dir().path, "/home/u/hf/hub");
  EXPECT_EQ(hf_hub_cache_dir().source, "HF_HOME");
  setenv("HUGGINGFACE_HUB_CACHE", "/legacy", 1);
  EXPECT_EQ(hf_hub_cache_dir().path, "/legacy");
  setenv("MLXRT_TEST_VAR", "/v", 1);
  setenv("HF_HUB_CACHE", "${MLXRT_TEST_VAR}/hub/$MLXRT_TEST_VAR/$UNSET_VAR_X", 1);
  EXPECT_EQ(hf_hub_cache_dir().path, "/v/hub//v/$UNSET_VAR_X");
  EXPECT_EQ(hf_hub_cache_dir().source, "HF_HUB_CACHE");
}

TEST(ManageFormats, SizeAsFormatSize) {
  EXPECT_EQ(format_cache_size(0), "0.0");
  EXPECT_EQ(format_cache_size(999), "999.0");
  EXPECT_EQ(format_cache_size(1000), "1.0K");
  EXPECT_EQ(format_cache_size(1234567), "1.2M");
  EXPECT_EQ(format_cache_size(999950000), "1000.0M");  // f"{999.95:3.1f}" rounds up within the unit
  EXPECT_EQ(format_cache_size(3398085269ULL), "3.4G");
}

TEST(ManageFormats, TimesinceAsHuggingfaceHub) {
  const double now = 1e9;
  EXPECT_EQ(format_timesince(now - 19, now), "a few seconds ago");
  EXPECT_EQ(format_timesince(now - 20, now), "20 seconds ago");
  EXPECT_EQ(format_timesince(now - 90, now), "2 minutes ago");   // round(1.5) == 2
  EXPECT_EQ(format_timesince(now - 150, now), "2 minutes ago");  // round(2.5) == 2
  EXPECT_EQ(format_timesince(now - 3600, now), "1 hour ago");
  EXPECT_EQ(format_timesince(now - 86400 * 3.3, now), "3 days ago");
  EXPECT_EQ(format_timesince(now - 86400 * 10.2, now), "1 week ago");
  EXPECT_EQ(format_timesince(now - 86400 * 40, now), "6 weeks ago");
  EXPECT_EQ(format_timesince(now - 86400 * 400, now), "1 year ago");
}

}  // namespace
}  // namespace mlxrt::io
