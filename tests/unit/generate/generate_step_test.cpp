// TokenGenerator (generate_step) builds the model's steps that mlx-lm's generate_step builds, one per
// token plus the one after the last, even though it hands out the first token before building the
// step after it (the time to first token): here a fake model counts its forward calls.
#include <gtest/gtest.h>

#include "call_counting_model.h"
#include "mlxrt/generate/generate_step.h"

namespace mlxrt::generate {
namespace {

constexpr int kVocab = 5;

// The next token is (last + 1) % 5.
struct CallCountingModel : test_support::CallCountingModel {
  CallCountingModel() : test_support::CallCountingModel(kVocab) {}
};

GenerateOptions tokens(int max_tokens) {
  GenerateOptions o;
  o.max_tokens = max_tokens;
  return o;
}

TEST(TokenGenerator, FirstTokenComesBeforeTheStepAfterItIsBuilt) {
  CallCountingModel model;
  TokenGenerator gen(model, {0, 1, 2}, tokens(4));
  EXPECT_EQ(model.calls(), 2);  // the prefill chunk {0, 1}, then the last prompt token's step
  auto first = gen.next();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->token, 3);
  EXPECT_EQ(model.calls(), 2);
  auto second = gen.next();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->token, 4);
  EXPECT_EQ(model.calls(), 4);  // the step owed since the first token, and the one after the second
}

TEST(TokenGenerator, BuildsMlxLmsStepsToTheEnd) {
  // mlx-lm: one step for the last prompt token, then one per token handed out (the last of them
  // computes the token after max_tokens, whose keys its cache keeps).
  for (int max_tokens : {1, 2, 5}) {
    CallCountingModel model;
    TokenGenerator gen(model, {0}, tokens(max_tokens));
    std::vector<int32_t> out;
    while (auto t = gen.next()) out.push_back(t->token);
    EXPECT_EQ(static_cast<int>(out.size()), max_tokens);
    EXPECT_EQ(out.front(), 1);
    EXPECT_EQ(model.calls(), 1 + max_tokens) << "max_tokens " << max_tokens;
  }
}

TEST(TokenGenerator, StepOwedAfterTheFirstTokenIsBuiltWhenTheCacheIsReadOrTheGeneratorEnds) {
  {
    CallCountingModel model;
    TokenGenerator gen(model, {0}, tokens(3));
    ASSERT_TRUE(gen.next());
    EXPECT_EQ(model.calls(), 1);
    gen.cache();
    EXPECT_EQ(model.calls(), 2);
    ASSERT_TRUE(gen.next());
    EXPECT_EQ(model.calls(), 3);  // not built twice
  }
  CallCountingModel model;
  {
    TokenGenerator gen(model, {0}, tokens(3));
    ASSERT_TRUE(gen.next());  // a caller that stops at the first token (a stop word, a client gone)
  }
  EXPECT_EQ(model.calls(), 2);
}

TEST(TokenGenerator, NoTokensAsked) {
  CallCountingModel model;
  TokenGenerator gen(model, {0, 1}, tokens(0));
  EXPECT_FALSE(gen.next());
  EXPECT_FALSE(gen.next());
  EXPECT_EQ(model.calls(), 2);
}

}  // namespace
}  // namespace mlxrt::generate
