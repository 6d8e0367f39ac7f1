// RandomState against mlx's Python key sequence (values from mlx 0.32.4's mx.random).
#include <gtest/gtest.h>

#include <mlx/ops.h>
#include <mlx/random.h>
#include <mlx/transforms.h>

#include "mlxrt/generate/random_state.h"
#include "mlxrt/generate/sampler.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::generate {
namespace {

std::vector<uint32_t> values(mx::array a) {
  mx::eval(a);
  return {a.data<uint32_t>(), a.data<uint32_t>() + a.size()};
}

TEST(RandomState, SeedAndSplitLikeMlxPython) {
  RandomState rng(0);
  EXPECT_EQ(values(rng.key()), (std::vector<uint32_t>{0, 0}));
  auto used = rng.next();
  EXPECT_EQ(values(rng.key()), (std::vector<uint32_t>{4146024105u, 967050713u}));
  EXPECT_EQ(values(used), (std::vector<uint32_t>{2718843009u, 1272950319u}));
}

TEST(RandomState, UniformDrawMatches) {
  // mx.random.seed(12345); mx.random.uniform(0, 1) == 0.0023064410779625177
  RandomState rng(12345);
  auto u = mx::random::uniform(mx::array(0), mx::array(1), {}, mx::float32, rng.next());
  EXPECT_EQ(u.item<float>(), 0.0023064410779625177f);
  EXPECT_EQ(values(rng.key()), (std::vector<uint32_t>{795667951u, 328582975u}));
}

TEST(RandomState, SkipEqualsDraws) {
  RandomState a(3), b(3);
  for (int i = 0; i < 5; ++i) a.next();
  b.skip(5);
  EXPECT_EQ(values(a.key()), values(b.key()));
}

TEST(Sampler, GreedyAtZeroTemperature) {
  auto sampler = make_sampler(SamplerParams{}, nullptr);
  float data[] = {0.1f, 2.0f, -1.0f};
  EXPECT_EQ(sampler(mx::array(data, {1, 3})).item<uint32_t>(), 1u);
}

TEST(Sampler, RejectsOutOfRangeParameters) {
  SamplerParams p;
  p.temp = -1;
  EXPECT_THROW(make_sampler(p, std::make_shared<RandomState>(0)), UsageError);
  p = {};
  p.temp = 1;
  p.top_p = 1.5;
  EXPECT_EQ(check_sampler_params(p)->param, "top_p");
  p = {};
  p.top_k = -2;
  EXPECT_EQ(check_sampler_params(p)->param, "top_k");
}

}  // namespace
}  // namespace mlxrt::generate

namespace mlxrt::generate {
namespace {

TEST(TopLogprobs, OrderAsMlxLmServer) {
  // mx.argpartition(-lp, kth=2)[:3] on this bfloat16 vector gives [3, 1, 6].
  float data[] = {-3.5f, -0.25f, -2.0f, -0.25f, -7.0f, -1.0f, -0.5f, -4.0f};
  auto lp = mx::astype(mx::array(data, {8}), mx::bfloat16);
  auto top = top_logprobs(lp, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 3);
  EXPECT_EQ(top[1].id, 1);
  EXPECT_EQ(top[2].id, 6);
  EXPECT_EQ(top[2].logprob, -0.5f);
  EXPECT_TRUE(top_logprobs(lp, 0).empty());
}

}  // namespace
}  // namespace mlxrt::generate
