// BatchGenerator builds the model steps mlx-lm's BatchGenerator builds, with the same rows, although
// it hands out a batch's first tokens before dispatching the step after them (when nothing else
// waits): a fake model counts its forward calls and the rows of each.
#include <gtest/gtest.h>

#include "call_counting_model.h"
#include "mlxrt/generate/batch_generator.h"

namespace mlxrt::generate {
namespace {

constexpr int kVocab = 7;

// The next token is (last + 1) % 7; the constructor's probe is the first call.
struct CallCountingModel : test_support::CallCountingModel {
  CallCountingModel() : test_support::CallCountingModel(kVocab) {}
};

BatchRequest request(std::vector<int32_t> prompt, int max_tokens) {
  BatchRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  return r;
}

// BatchRequest holds its cache's unique_ptrs: built in place, not from an initializer list.
std::vector<BatchRequest> requests(const std::vector<std::pair<std::vector<int32_t>, int>>& specs) {
  std::vector<BatchRequest> rs;
  for (const auto& [prompt, max_tokens] : specs) rs.push_back(request(prompt, max_tokens));
  return rs;
}

// next() until it hands out tokens
std::vector<BatchGenerationResponse> tokens(BatchGenerator& gen) {
  while (true) {
    auto [prompts, generated] = gen.next();
    if (!generated.empty() || prompts.empty()) return generated;
  }
}

TEST(BatchGenerator, FirstTokensComeBeforeTheStepAfterThemIsDispatched) {
  CallCountingModel model;
  BatchGenerator gen(model, {});
  const int probe = model.calls();
  gen.insert(requests({{{0, 1, 2}, 4}, {{3, 4, 5}, 4}}));
  auto first = tokens(gen);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].token, 3);
  EXPECT_EQ(first[1].token, 6);
  EXPECT_EQ(model.calls() - probe, 2);  // the prefill chunk, the last prompt tokens' step
  auto second = tokens(gen);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].token, 4);
  EXPECT_EQ(second[1].token, 0);
  EXPECT_EQ(model.calls() - probe, 4);  // the step owed since the first tokens, and the next one
}

TEST(BatchGenerator, BuildsMlxLmsStepsWithTheSameRows) {
  // mlx-lm: the prefill chunk, the last prompt tokens' step, then one step per token handed out
  // (that of the last token included), every step over the rows still generating before it.
  for (int max_tokens : {1, 2, 3}) {
    CallCountingModel model;
    BatchGenerator gen(model, {});
    const int probe = model.calls();
    gen.insert(requests({{{0, 1}, max_tokens}, {{2, 3}, max_tokens + 1}}));
    int handed_out = 0;
    for (auto out = tokens(gen); !out.empty(); out = tokens(gen)) handed_out += static_cast<int>(out.size());
    EXPECT_EQ(handed_out, 2 * max_tokens + 1);
    std::vector<int> expected = {2, 2};  // prefill {0}, {2}; the step of 1 and 3
    for (int k = 0; k < max_tokens; ++k) expected.push_back(2);
    expected.push_back(1);  // the longer row's last step
    EXPECT_EQ(std::vector<int>(model.rows.begin() + probe, model.rows.end()), expected) << "max_tokens " << max_tokens;
  }
}

TEST(BatchGenerator, OwedStepIsDispatchedBeforeRowsAreRemoved) {
  CallCountingModel model;
  BatchGenerator gen(model, {});
  const int probe = model.calls();
  auto uids = gen.insert(requests({{{0, 1}, 5}, {{2, 3}, 5}}));
  ASSERT_EQ(tokens(gen).size(), 2u);
  EXPECT_EQ(model.calls() - probe, 2);
  gen.remove({uids[0]});
  ASSERT_EQ(model.calls() - probe, 3);
  EXPECT_EQ(model.rows.back(), 2);  // both rows, as mlx-lm dispatched it before the removal
  auto next = tokens(gen);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].uid, uids[1]);
  EXPECT_EQ(model.rows.back(), 1);
}

TEST(BatchGenerator, NoDeferralWhileAPromptWaits) {
  CallCountingModel model;
  BatchGenerator gen(model, {});
  const int probe = model.calls();
  gen.insert(requests({{{0, 1}, 5}}));
  gen.next();  // prefill
  gen.next();  // the last prompt token's step
  gen.insert(requests({{{2, 3}, 5}}));
  auto [prompts, generated] = gen.next();
  ASSERT_EQ(generated.size(), 1u);
  // mlx-lm's order: the next step dispatched before the first token is read, then the new prompt
  EXPECT_EQ(std::vector<int>(model.rows.begin() + probe, model.rows.end()), (std::vector<int>{1, 1, 1, 1}));
}

}  // namespace
}  // namespace mlxrt::generate
