#include "mlxrt/model/nn/expert_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include <mlx/ops.h>
#include <mlx/transforms.h>

namespace mlxrt::model::nn {
namespace {

using Key = ExpertLru::Key;

TEST(ExpertLru, EvictsLeastRecentlyUsedFirst) {
  ExpertLru lru;
  lru.insert({0, 1}, 10);
  lru.next_step();
  lru.insert({0, 2}, 10);
  lru.next_step();
  lru.insert({1, 1}, 10);
  lru.next_step();
  EXPECT_TRUE(lru.touch({0, 1}));  // now the most recent
  auto evicted = lru.evict_to(20);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], (Key{0, 2}));
  EXPECT_EQ(lru.bytes(), 20u);
  EXPECT_FALSE(lru.holds({0, 2}));
  EXPECT_TRUE(lru.holds({1, 1}));
}

TEST(ExpertLru, NeverEvictsWhatTheCurrentStepUses) {
  ExpertLru lru;
  lru.insert({0, 0}, 10);
  lru.next_step();
  lru.insert({0, 1}, 10);
  lru.insert({0, 2}, 10);
  lru.insert({0, 3}, 10);
  // Over budget, but only the previous step's key may go.
  auto evicted = lru.evict_to(10);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], (Key{0, 0}));
  EXPECT_EQ(lru.bytes(), 30u);
  lru.next_step();
  EXPECT_EQ(lru.evict_to(10).size(), 2u);
  EXPECT_EQ(lru.size(), 1u);
  EXPECT_TRUE(lru.holds({0, 3}));
}

TEST(ExpertLru, KeysOfDifferentBlocksAreDistinct) {
  ExpertLru lru;
  lru.insert({1, 0}, 5);
  EXPECT_FALSE(lru.touch({0, 1}));
  EXPECT_FALSE(lru.touch({0, 0}));
  EXPECT_TRUE(lru.touch({1, 0}));
}

// A file holding one float32 tensor [4 experts, 2, 3] with value 100 * expert + i, after a header.
struct ExpertFile {
  std::filesystem::path path;
  static constexpr int kHeader = 16;
  ExpertFile() {
    path = std::filesystem::temp_directory_path() / ("expert_store_test_" + std::to_string(::getpid()) + ".bin");
    std::ofstream f(path, std::ios::binary);
    std::vector<char> header(kHeader, 'h');
    f.write(header.data(), header.size());
    for (int e = 0; e < 4; ++e)
      for (int i = 0; i < 6; ++i) {
        float v = 100.0f * e + i;
        f.write(reinterpret_cast<const char*>(&v), sizeof v);
      }
  }
  ~ExpertFile() { std::filesystem::remove(path); }
  StreamedTensor tensor() const {
    return StreamedTensor{"t", mx::float32, {2, 3}, 24, TensorSource{{FileSpan{0, kHeader, 96}}}};
  }
};

std::vector<float> values(const mx::array& a) {
  auto c = mx::astype(a, mx::float32);
  mx::eval(c);
  return std::vector<float>(c.data<float>(), c.data<float>() + c.size());
}

std::vector<uint32_t> index_values(const mx::array& a) {
  auto c = mx::flatten(a);
  mx::eval(c);
  return std::vector<uint32_t>(c.data<uint32_t>(), c.data<uint32_t>() + c.size());
}

TEST(ExpertStore, CompactStackAndRemappedIndices) {
  ExpertFile file;
  ExpertStore store(48, {file.path});  // two experts
  const int block = store.add_block({file.tensor()}, 4, 2);
  EXPECT_EQ(store.min_budget(), 48u);

  auto sel = store.select(block, mx::array({2u, 0u, 2u, 2u}, {2, 2}, mx::uint32));
  EXPECT_EQ(index_values(sel.indices), (std::vector<uint32_t>{1, 0, 1, 1}));
  ASSERT_EQ(sel.tensors.size(), 1u);
  EXPECT_EQ(sel.tensors[0].shape(), (mx::Shape{2, 2, 3}));
  EXPECT_EQ(values(sel.tensors[0]), (std::vector<float>{0, 1, 2, 3, 4, 5, 200, 201, 202, 203, 204, 205}));
  auto s = store.stats();
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.bytes_read, 48u);

  // Expert 0 is held (a hit); 3 is read and 2, the least recently used, leaves.
  sel = store.select(block, mx::array({3u, 0u}, {1, 2}, mx::uint32));
  EXPECT_EQ(index_values(sel.indices), (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(values(sel.tensors[0]), (std::vector<float>{0, 1, 2, 3, 4, 5, 300, 301, 302, 303, 304, 305}));
  s = store.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.bytes_read, 72u);
  EXPECT_EQ(s.resident_bytes, 48u);
  EXPECT_NE(format_expert_stats(s).find("hit rate 25.0% (1 hits, 3 misses)"), std::string::npos);
}

TEST(ExpertStore, ReadsAcrossStackedParts) {
  // The same tensor as two spans (experts 0-1 and 2-3), as a sanitize's stack of per-expert tensors.
  ExpertFile file;
  auto t = file.tensor();
  t.source.parts = {FileSpan{0, ExpertFile::kHeader + 48, 48}, FileSpan{0, ExpertFile::kHeader, 48}};
  ExpertStore store(1000, {file.path});
  const int block = store.add_block({t}, 4, 1);
  auto sel = store.select(block, mx::array({0u, 3u}, {2, 1}, mx::uint32));
  EXPECT_EQ(values(sel.tensors[0]), (std::vector<float>{200, 201, 202, 203, 204, 205, 100, 101, 102, 103, 104, 105}));
}

}  // namespace
}  // namespace mlxrt::model::nn
