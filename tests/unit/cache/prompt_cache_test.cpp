// Trimming (what the server's prompt-cache reuse relies on) and the prompt-cache file round trip.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <mlx/ops.h>
#include <mlx/random.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/cache/prompt_cache.h"
#include "mlxrt/cache/quantized_kv_cache.h"
#include "mlxrt/cache/rotating_kv_cache.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cache {
namespace {

mx::array kv(int length, int seed) {
  return mx::astype(mx::random::normal({1, 2, length, 32}, mx::float32, 0, 1, mx::random::key(seed)), mx::bfloat16);
}

void feed(Cache& c, int length, int seed) {
  auto x = kv(length, seed);
  c.update_and_fetch(x, mx::negative(x));
}

bool same(const mx::array& a, const mx::array& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && mx::array_equal(a, b).item<bool>();
}

TEST(TrimPromptCache, TrimsEveryLayerAndReportsTheFirst) {
  CacheList cache;
  cache.push_back(std::make_unique<KVCache>());
  cache.push_back(std::make_unique<QuantizedKVCache>(32, 4));
  for (auto& c : cache) feed(*c, 5, 1);
  ASSERT_TRUE(can_trim_prompt_cache(cache));
  EXPECT_EQ(trim_prompt_cache(cache, 2), 2);
  EXPECT_EQ(cache[0]->offset(), 3);
  EXPECT_EQ(cache[1]->offset(), 3);
  EXPECT_EQ(trim_prompt_cache(cache, 10), 3);  // clamped to what is there
  EXPECT_EQ(cache[1]->offset(), 0);
  CacheList none;
  EXPECT_EQ(trim_prompt_cache(none, 1), 0);
}

TEST(TrimPromptCache, RotatingCacheStopsBeingTrimmableOnceFull) {
  CacheList cache;
  cache.push_back(std::make_unique<KVCache>());
  cache.push_back(std::make_unique<RotatingKVCache>(4));
  for (int t = 0; t < 3; ++t)
    for (auto& c : cache) feed(*c, 1, t);
  ASSERT_TRUE(can_trim_prompt_cache(cache));
  EXPECT_EQ(trim_prompt_cache(cache, 1), 1);
  auto& rotating = dynamic_cast<RotatingKVCache&>(*cache[1]);
  EXPECT_EQ(rotating.idx(), 2);
  for (int t = 0; t < 2; ++t)
    for (auto& c : cache) feed(*c, 1, 10 + t);
  EXPECT_FALSE(can_trim_prompt_cache(cache));  // offset 4 == max_size
  EXPECT_EQ(trim_prompt_cache(cache, 1), 0);
  EXPECT_EQ(cache[0]->offset(), 4);
}

TEST(PromptCacheFile, RoundTripKeepsEveryClassAndItsState) {
  CacheList cache;
  cache.push_back(std::make_unique<KVCache>());
  cache.push_back(std::make_unique<RotatingKVCache>(8, 4));
  cache.push_back(std::make_unique<QuantizedKVCache>(32, 8));
  cache.push_back(std::make_unique<KVCache>());  // empty: saved as "none"
  feed(*cache[0], 3, 1);
  feed(*cache[1], 6, 2);
  for (int t = 0; t < 5; ++t) feed(*cache[1], 1, 3 + t);  // wrapped ring buffer
  feed(*cache[2], 3, 9);
  const auto dir = std::filesystem::temp_directory_path() / ("mlxrt_cache_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  save_prompt_cache(dir / "c", cache, {{"model", "m"}, {"tokenizer_config", "{}"}});
  ASSERT_TRUE(std::filesystem::exists(dir / "c.safetensors"));  // the suffix mlx appends

  auto [loaded, metadata] = load_prompt_cache(dir / "c.safetensors");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(metadata, (PromptCacheMetadata{{"model", "m"}, {"tokenizer_config", "{}"}}));
  ASSERT_EQ(loaded.size(), 4u);
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_EQ(cache_class_name(*loaded[i]), cache_class_name(*cache[i]));
    EXPECT_EQ(loaded[i]->offset(), cache[i]->offset());
  }
  auto& r0 = dynamic_cast<RotatingKVCache&>(*cache[1]);
  auto& r1 = dynamic_cast<RotatingKVCache&>(*loaded[1]);
  EXPECT_EQ(r1.idx(), r0.idx());
  EXPECT_EQ(r1.keep(), 4);
  EXPECT_EQ(r1.max_size(), 8);
  EXPECT_TRUE(same(r1.buffers()->keys, r0.buffers()->keys));
  auto& q0 = dynamic_cast<QuantizedKVCache&>(*cache[2]);
  auto& q1 = dynamic_cast<QuantizedKVCache&>(*loaded[2]);
  EXPECT_EQ(q1.bits(), 8);
  EXPECT_EQ(q1.group_size(), 32);
  EXPECT_TRUE(same(q1.buffers()->values.packed, q0.buffers()->values.packed));
  EXPECT_TRUE(loaded[3]->empty());

  // Both continue identically.
  auto x = kv(1, 42);
  auto a = std::get<PlainKV>(cache[1]->update_and_fetch(x, x));
  auto b = std::get<PlainKV>(loaded[1]->update_and_fetch(x, x));
  EXPECT_TRUE(same(a.keys, b.keys));
}

TEST(MaybeQuantizeKvCache, ConvertsPlainLayersFromTheStartOffset) {
  CacheList cache;
  cache.push_back(std::make_unique<KVCache>());
  feed(*cache[0], 3, 1);
  maybe_quantize_kv_cache(cache, std::nullopt, 32, 0);
  EXPECT_EQ(cache_class_name(*cache[0]), "KVCache");
  maybe_quantize_kv_cache(cache, 4, 32, 4);
  EXPECT_EQ(cache_class_name(*cache[0]), "KVCache");  // offset 3 < start 4
  maybe_quantize_kv_cache(cache, 4, 32, 3);
  ASSERT_EQ(cache_class_name(*cache[0]), "QuantizedKVCache");
  EXPECT_EQ(cache[0]->offset(), 3);
  EXPECT_EQ(dynamic_cast<QuantizedKVCache&>(*cache[0]).bits(), 4);

  CacheList rotating;
  rotating.push_back(std::make_unique<RotatingKVCache>(8));
  feed(*rotating[0], 3, 1);
  EXPECT_THROW(maybe_quantize_kv_cache(rotating, 4, 32, 0), UnsupportedError);
}

}  // namespace
}  // namespace mlxrt::cache

namespace mlxrt::cache {
namespace {

std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("mlxrt_cache_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

// A multi-token update leaves mlx-lm's rotating buffer longer than max_size (max_size + S - 1, in
// temporal order, idx == length); such a file is valid and must keep loading and continuing.
TEST(PromptCacheFile, RotatingBufferLongerThanMaxSizeInOrderStillLoads) {
  CacheList cache;
  cache.push_back(std::make_unique<RotatingKVCache>(8, 0));
  feed(*cache[0], 11, 1);
  const auto dir = scratch_dir("long_rotating");
  save_prompt_cache(dir / "c.safetensors", cache, {});
  auto [loaded, metadata] = load_prompt_cache(dir / "c.safetensors");
  std::filesystem::remove_all(dir);
  auto x = kv(1, 5);
  auto a = std::get<PlainKV>(cache[0]->update_and_fetch(x, x));
  auto b = std::get<PlainKV>(loaded[0]->update_and_fetch(x, x));
  EXPECT_TRUE(same(a.keys, b.keys));
}

namespace {

// What loading a file holding one RotatingKVCache in state (stored length `stored`, offset
// `offset`, max_size `max_size`, idx `idx`) throws as a ConfigError ("" when it loads).
std::string rotating_load_error(const std::string& name, int max_size, int stored, int offset, int idx) {
  CacheList cache;
  auto rotating = std::make_unique<RotatingKVCache>(max_size, 0);
  rotating->set_state(kv(stored, 1), kv(stored, 2), offset, 0, max_size, idx);
  cache.push_back(std::move(rotating));
  const auto dir = scratch_dir(name);
  save_prompt_cache(dir / "c.safetensors", cache, {});
  std::string what;
  try {
    load_prompt_cache(dir / "c.safetensors");
  } catch (const ConfigError& e) {
    what = e.what();
  }
  std::filesystem::remove_all(dir);
  return what;
}

}  // namespace

// A wrapped ring (idx inside the buffer) longer than max_size is nothing mlx-lm writes; it used to
// fail later inside MLX with a broadcast error. It is refused naming the file and both sizes.
TEST(PromptCacheFile, RotatingStoredLengthBeyondMaxSizeIsRefused) {
  const auto what = rotating_load_error("bad_rotating", 8, 12, 20, 3);
  EXPECT_NE(what.find("c.safetensors"), std::string::npos) << what;
  EXPECT_NE(what.find("stored length 12 exceeds max_size 8"), std::string::npos) << what;
}

// A ring buffer shorter than the window its offset fills (found by the fuzzer: stored length 6,
// offset past max_size) made the next update allocate a negative size inside MLX. Refused instead.
TEST(PromptCacheFile, RotatingStoredLengthShorterThanItsWindowIsRefused) {
  const auto what = rotating_load_error("short_rotating", 16, 6, 40, 2);
  EXPECT_NE(what.find("stored length 6 is shorter than the 16 positions"), std::string::npos) << what;
}

// The file appears whole or not at all: written under a partial name that is renamed into place;
// the partials of writers that were killed are removed by the next save into that directory.
TEST(PromptCacheFile, SaveIsAtomicAndCleansPartialsOfDeadWriters) {
  const auto dir = scratch_dir("atomic");
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const auto stale = dir / (".c.safetensors.partial-" + std::to_string(child) + ".safetensors");
  std::ofstream(stale) << "half written";
  CacheList cache;
  cache.push_back(std::make_unique<KVCache>());
  feed(*cache[0], 3, 1);
  save_prompt_cache(dir / "c", cache, {{"model", "m"}});
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::filesystem::remove_all(dir);
  EXPECT_EQ(names, std::vector<std::string>{"c.safetensors"});
}

}  // namespace mlxrt::cache
