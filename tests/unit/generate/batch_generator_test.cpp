// BatchGenerator builds the model steps mlx-lm's BatchGenerator builds, with the same rows, although
// it hands out a batch's first tokens before dispatching the step after them (when nothing else
// waits): a fake model counts its forward calls and the rows of each.
#include <gtest/gtest.h>

#include <map>

#include <mlx/memory.h>

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

// --batch-order prompts-first

BatchGeneratorOptions prompts_first() {
  BatchGeneratorOptions o;
  o.prompts_first = true;
  return o;
}

// Every token handed out, as (uid, token), and the model's calls, until the generator is empty.
struct Run {
  std::vector<std::pair<int, int32_t>> tokens;
  std::vector<int> rows, lengths;
};
Run run_all(const BatchGeneratorOptions& options, const std::vector<std::pair<std::vector<int32_t>, int>>& specs) {
  CallCountingModel model;
  BatchGenerator gen(model, options);
  const int probe = model.calls();
  gen.insert(requests(specs));
  Run run;
  for (auto out = tokens(gen); !out.empty(); out = tokens(gen))
    for (const auto& r : out) run.tokens.emplace_back(r.uid, r.token);
  run.rows.assign(model.rows.begin() + probe, model.rows.end());
  run.lengths.assign(model.lengths.begin() + probe, model.lengths.end());
  return run;
}

TEST(BatchGeneratorPromptsFirst, PromptsSubmittedTogetherRunMlxLmsSteps) {
  // Prompts of more than one token that fit one prefill batch: the same calls with the same rows
  // and positions, the same tokens in the same order, whichever order a step takes.
  const std::vector<std::pair<std::vector<int32_t>, int>> specs = {{{0, 1, 2}, 3}, {{3, 4}, 5}, {{5, 6}, 2}};
  auto mlx_lm = run_all({}, specs);
  auto ours = run_all(prompts_first(), specs);
  EXPECT_EQ(ours.tokens, mlx_lm.tokens);
  EXPECT_EQ(ours.rows, mlx_lm.rows);
  EXPECT_EQ(ours.lengths, mlx_lm.lengths);
}

TEST(BatchGeneratorPromptsFirst, MorePromptsThanAPrefillBatchAllFinish) {
  BatchGeneratorOptions o = prompts_first();
  o.prefill_batch_size = 2;
  const std::vector<std::pair<std::vector<int32_t>, int>> specs = {
      {{0, 1, 2}, 3}, {{3, 4}, 5}, {{5}, 2}, {{6, 0, 1, 2}, 4}, {{1, 2}, 1}};
  auto ours = run_all(o, specs);
  // Each row's tokens count up from its prompt's last token, max_tokens of them.
  std::map<int, std::vector<int32_t>> by_uid;
  for (const auto& [uid, token] : ours.tokens) by_uid[uid].push_back(token);
  ASSERT_EQ(by_uid.size(), specs.size());
  for (size_t u = 0; u < specs.size(); ++u) {
    const auto& [prompt, max_tokens] = specs[u];
    std::vector<int32_t> expected;
    for (int k = 1; k <= max_tokens; ++k) expected.push_back((prompt.back() + k) % kVocab);
    EXPECT_EQ(by_uid[static_cast<int>(u)], expected) << "uid " << u;
  }
  for (int r : ours.rows) EXPECT_LE(r, 5);
}

TEST(BatchGeneratorPromptsFirst, AJoiningRowsFirstTokenComesFromTheCallThatPrefillsIt) {
  for (bool first : {false, true}) {
    CallCountingModel model;
    BatchGeneratorOptions o;
    o.prompts_first = first;
    BatchGenerator gen(model, o);
    gen.insert(requests({{{0, 1}, 20}}));
    tokens(gen);
    tokens(gen);  // A generates
    const int before = model.calls();
    auto b = gen.insert(requests({{{3, 4, 5}, 20}}))[0];
    int calls = 0;
    for (bool got_b = false; !got_b;) {
      auto [prompts, generated] = gen.next();
      ++calls;
      for (const auto& r : generated) {
        if (r.uid != b) continue;
        got_b = true;
        EXPECT_EQ(r.token, 6);
      }
      ASSERT_LT(calls, 5);
    }
    const std::vector<int> steps(model.rows.begin() + before, model.rows.end());
    if (first) {
      EXPECT_EQ(calls, 1);
      // B's prefill chunk, B's first step alone, then one step over A and B
      EXPECT_EQ(steps, (std::vector<int>{1, 1, 2}));
    } else {
      EXPECT_EQ(calls, 3);  // mlx-lm: decode A + prefill B; decode A + B's first step; decode A and B
      EXPECT_EQ(steps, (std::vector<int>{1, 1, 1, 1, 2}));
    }
  }
}

TEST(BatchGeneratorPromptsFirst, ALongPromptStillTakesOneChunkACall) {
  CallCountingModel model;
  BatchGeneratorOptions o = prompts_first();
  o.prefill_step_size = 2;
  BatchGenerator gen(model, o);
  auto a = gen.insert(requests({{{0, 1}, 30}}))[0];
  tokens(gen);
  tokens(gen);
  auto b = gen.insert(requests({{{1, 2, 3, 4, 5, 6, 0}, 30}}))[0];  // 6 positions to prefill: 3 chunks
  std::vector<int> a_tokens_per_call;
  bool got_b = false;
  while (!got_b) {
    auto [prompts, generated] = gen.next();
    int from_a = 0;
    for (const auto& r : generated) {
      from_a += r.uid == a;
      got_b = got_b || r.uid == b;
    }
    a_tokens_per_call.push_back(from_a);
  }
  // A decodes at every call while B's three chunks go in, one a call; B's first token at the third.
  EXPECT_EQ(a_tokens_per_call, (std::vector<int>{1, 1, 1}));
}

TEST(BatchGeneratorPromptsFirst, NoPromptIsAdmittedPastTheDecodeConcurrency) {
  CallCountingModel model;
  BatchGeneratorOptions o = prompts_first();
  o.completion_batch_size = 2;
  o.prefill_batch_size = 2;
  BatchGenerator gen(model, o);
  gen.insert(requests({{{0}, 3}, {{1}, 3}, {{2}, 3}}));
  size_t most = 0;
  for (int k = 0; k < 20 && gen.size() > 0; ++k) {
    gen.next();
    most = std::max(most, gen.generating());
  }
  EXPECT_EQ(gen.size(), 0u);
  EXPECT_LE(most, 2u);
}

TEST(BatchGeneratorPromptsFirst, APromptMidPrefillWaitsWhileTheDecodingRowsAreFull) {
  // Both orders: X starts, A stays mid-prefill, B joins and fills --decode-concurrency (2); the
  // next call only decodes (mlx-lm's early exit), A's next chunk waits for a free row.
  for (bool first : {false, true}) {
    CallCountingModel model;
    BatchGeneratorOptions o;
    o.prompts_first = first;
    o.completion_batch_size = 2;
    o.prefill_batch_size = 2;
    o.prefill_step_size = 2;
    BatchGenerator gen(model, o);
    gen.insert(requests({{{0, 1}, 30}, {{1, 2, 3, 4, 5, 6, 0, 1}, 30}}));  // X, A
    while (gen.generating() < 1) gen.next();
    gen.insert(requests({{{3, 4}, 30}}));  // B
    while (gen.generating() < 2) gen.next();
    gen.next();  // the step owed or in flight when B started
    const int before = model.calls();
    gen.next();
    EXPECT_EQ(std::vector<int>(model.rows.begin() + before, model.rows.end()), (std::vector<int>{2}))
        << (first ? "prompts first" : "mlx-lm's order");
    EXPECT_EQ(model.lengths.back(), 1);
  }
}

// --first-tokens early

// Each call's model calls and the tokens it hands out, until the generator is empty: A generates,
// then B joins, then C, while A's and B's rows decode.
struct Calls {
  std::vector<std::vector<int>> rows;                    // the model's calls' rows, a list per next()
  std::vector<std::vector<std::pair<int, int32_t>>> out;  // (uid, token) handed out, a list per next()
};
Calls joining_rows(bool early) {
  CallCountingModel model;
  BatchGeneratorOptions o = prompts_first();
  o.first_tokens_early = early;
  BatchGenerator gen(model, o);
  Calls calls;
  auto next = [&] {
    const int before = model.calls();
    auto [prompts, generated] = gen.next();
    calls.rows.emplace_back(model.rows.begin() + before, model.rows.end());
    calls.out.emplace_back();
    for (const auto& r : generated) calls.out.back().emplace_back(r.uid, r.token);
  };
  gen.insert(requests({{{0, 1}, 6}}));
  for (int k = 0; k < 3; ++k) next();
  gen.insert(requests({{{3, 4, 5}, 4}}));
  for (int k = 0; k < 2; ++k) next();
  gen.insert(requests({{{2, 3}, 3}}));
  while (gen.size() > 0) next();
  return calls;
}

TEST(BatchGeneratorFirstTokensEarly, AJoiningRowsFirstTokenIsHandedOutBeforeTheNextStepIsEncoded) {
  const auto pipelined = joining_rows(false);
  const auto early = joining_rows(true);
  // The call where B joins: its prefill chunk and its first step alone, then (pipelined) the step
  // over A and B is encoded before A's and B's tokens are read, or (early) left to the next call.
  ASSERT_GE(pipelined.rows.size(), 4u);
  EXPECT_EQ(pipelined.rows[3], (std::vector<int>{1, 1, 2}));
  EXPECT_EQ(early.rows[3], (std::vector<int>{1, 1}));
  EXPECT_EQ(early.out[3], pipelined.out[3]);  // A's token and B's first, from the same call
  EXPECT_EQ(early.rows[4].front(), 2) << "the deferred step first";
  // The same model calls in the same order, and the same tokens handed out in the same order.
  auto flat = [](const auto& lists) {
    std::vector<typename std::decay_t<decltype(lists)>::value_type::value_type> all;
    for (const auto& l : lists) all.insert(all.end(), l.begin(), l.end());
    return all;
  };
  EXPECT_EQ(flat(early.rows), flat(pipelined.rows));
  EXPECT_EQ(flat(early.out), flat(pipelined.out));
}

TEST(BatchGeneratorFirstTokensEarly, DoesNothingInMlxLmsOrder) {
  // There a call's prompt work follows its decoding: a step deferred past it would take the rows
  // it starts. So the calls are mlx-lm's either way.
  auto run = [](bool early) {
    BatchGeneratorOptions o;
    o.first_tokens_early = early;
    o.prefill_batch_size = 2;
    return run_all(o, {{{0, 1, 2}, 3}, {{3, 4}, 5}, {{5, 6}, 2}, {{1}, 4}});
  };
  const auto pipelined = run(false), early = run(true);
  EXPECT_EQ(early.rows, pipelined.rows);
  EXPECT_EQ(early.lengths, pipelined.lengths);
  EXPECT_EQ(early.tokens, pipelined.tokens);
}

TEST(BatchGenerator, APrefillChunkClearsTheBufferCacheAsMlxLmUnlessUnderTheLimit) {
  for (size_t limit : {size_t{0}, size_t{1} << 30}) {
    CallCountingModel model;
    BatchGeneratorOptions o;
    o.prefill_step_size = 2;
    o.prefill_buffer_cache_bytes = limit;
    BatchGenerator gen(model, o);
    gen.insert(requests({{{0, 1, 2, 3, 4, 5, 6}, 2}}));
    {
      auto freed = mx::zeros({1 << 20});  // 4 MB left in MLX's buffer cache when it goes
      mx::eval(freed);
    }
    ASSERT_GT(mx::get_cache_memory(), 0u);
    gen.next();  // the prompt's first chunk, waited for
    constexpr size_t kFreed = size_t{4} << 20;
    if (limit == 0)
      EXPECT_LT(mx::get_cache_memory(), kFreed) << "mlx-lm clears it after every chunk";
    else
      EXPECT_GE(mx::get_cache_memory(), kFreed) << "kept: under the limit";
    while (gen.size() > 0) gen.next();
  }
}

// --- join_prefill_beside, on a stream of its own and interleaved with the batch's step pieces ---

BatchGeneratorOptions beside(bool interleaved = false) {
  BatchGeneratorOptions o = prompts_first();
  o.join_prefill_beside = true;
  o.join_prefill_interleaved = interleaved;
  o.step_piece_ops = 5;  // the test models' steps are a few dozen ops: several pieces each
  return o;
}

// Each test runs beside (false) and interleaved (true).
class BatchGeneratorBeside : public testing::TestWithParam<bool> {
 protected:
  BatchGeneratorOptions options() const { return beside(GetParam()); }
};

// Every token each uid was handed, in order, running next() until nothing is left.
std::map<int, std::vector<int32_t>> drain(BatchGenerator& gen, std::map<int, std::vector<int32_t>> got = {},
                                         int max_calls = 200) {
  for (int k = 0; k < max_calls && gen.size() > 0; ++k)
    for (const auto& r : gen.next().second) got[r.uid].push_back(r.token);
  EXPECT_EQ(gen.size(), 0u);
  return got;
}

TEST_P(BatchGeneratorBeside, AJoiningRowIsPrefilledBesideTheBatchAndMergesIntoIt) {
  CallCountingModel model;
  BatchGenerator gen(model, options());
  // Long enough that B's prefill, on another stream or between pieces, is done before A ends even
  // when the threads of a loaded machine let A step many times first.
  constexpr int kA = 2000;
  auto a = gen.insert(requests({{{0, 1}, kA}}))[0];
  std::map<int, std::vector<int32_t>> got;
  for (int k = 0; k < 2; ++k)
    for (const auto& r : tokens(gen)) got[r.uid].push_back(r.token);
  const int before = model.calls();
  auto b = gen.insert(requests({{{3, 4, 5}, 6}}))[0];
  // Until B's first token: A goes on decoding alone (how many steps depends on the threads).
  int b_first_at = -1;
  for (int k = 0; k < kA && b_first_at < 0; ++k) {
    for (const auto& r : gen.next().second) {
      got[r.uid].push_back(r.token);
      if (r.uid == b) b_first_at = model.calls();
    }
  }
  ASSERT_GE(b_first_at, 0);
  const int a_left = kA - static_cast<int>(got[a].size());
  ASSERT_GE(a_left, 3) << "A ended before B joined: the test needs a longer A";
  got = drain(gen, got, kA);
  // Each row's tokens, each handed out once: (last + k) % 7.
  std::vector<int32_t> want_a;
  for (int k = 1; k <= kA; ++k) want_a.push_back((1 + k) % kVocab);
  EXPECT_EQ(got[a], want_a);
  EXPECT_EQ(got[b], (std::vector<int32_t>{6, 0, 1, 2, 3, 4}));
  // B's prefill chunk (2 positions) and its first step, each of B alone...
  const std::vector<int> rows(model.rows.begin() + before, model.rows.end());
  const std::vector<int> lengths(model.lengths.begin() + before, model.lengths.end());
  auto chunk = std::find(lengths.begin(), lengths.end(), 2);
  ASSERT_NE(chunk, lengths.end());
  EXPECT_EQ(rows[chunk - lengths.begin()], 1);
  EXPECT_EQ(rows[chunk - lengths.begin() + 1], 1);
  // ... then, once its first token is out, steps over A and B together (at most the step A had in
  // flight comes between): B's five other tokens, or as many as A has left.
  const std::vector<int> after(model.rows.begin() + b_first_at, model.rows.end());
  EXPECT_GE(std::count(after.begin(), after.end(), 2), std::min(5, a_left - 1));
}

TEST_P(BatchGeneratorBeside, ARowThatEndsAtItsFirstTokenGoesOutWithTheMergedRead) {
  CallCountingModel model;
  BatchGenerator gen(model, options());
  auto a = gen.insert(requests({{{0, 1}, 8}}))[0];
  std::map<int, std::vector<int32_t>> got;
  for (const auto& r : tokens(gen)) got[r.uid].push_back(r.token);
  auto b = gen.insert(requests({{{3, 4}, 1}}))[0];
  std::optional<std::string> b_finish;
  for (int k = 0; k < 50 && gen.size() > 0; ++k) {
    for (const auto& r : gen.next().second) {
      got[r.uid].push_back(r.token);
      if (r.uid == b) b_finish = r.finish_reason;
    }
  }
  EXPECT_EQ(got[a], (std::vector<int32_t>{2, 3, 4, 5, 6, 0, 1, 2}));
  EXPECT_EQ(got[b], (std::vector<int32_t>{5}));
  EXPECT_EQ(b_finish, std::optional<std::string>("length"));
}

TEST_P(BatchGeneratorBeside, RowsRemovedWhileJoiningOrPrefillingLeaveTheRestWhole) {
  CallCountingModel model;
  BatchGeneratorOptions o = options();
  o.prefill_step_size = 2;
  BatchGenerator gen(model, o);
  auto a = gen.insert(requests({{{0, 1}, 10}}))[0];
  std::map<int, std::vector<int32_t>> got;
  for (const auto& r : tokens(gen)) got[r.uid].push_back(r.token);
  // B: one chunk then its first step; C: three chunks (one a call, once the last is computed).
  auto bc = gen.insert(requests({{{3, 4}, 6}, {{1, 2, 3, 4, 5, 6, 0}, 6}}));
  auto [prompts, generated] = gen.next();
  for (const auto& r : generated) got[r.uid].push_back(r.token);
  gen.remove({bc[1]});
  got = drain(gen, got);
  EXPECT_EQ(got[a], (std::vector<int32_t>{2, 3, 4, 5, 6, 0, 1, 2, 3, 4}));
  EXPECT_EQ(got[bc[0]], (std::vector<int32_t>{5, 6, 0, 1, 2, 3}));
  EXPECT_TRUE(got[bc[1]].empty());
}

// The counting model with milliseconds of arithmetic in every call (a chain of products that
// reads nothing of the inputs): its steps are still running when the generator looks at them.
struct SlowModel : CallCountingModel {
  mx::array weight = mx::ones(mx::default_device() == mx::Device::gpu ? mx::Shape{4096, 4096} : mx::Shape{512, 512});
  mx::array operator()(const mx::array& inputs, model::CacheList* caches) override {
    auto work = weight;
    for (int i = 0; i < 8; ++i) work = mx::matmul(work, weight);
    return mx::add(CallCountingModel::operator()(inputs, caches), mx::multiply(mx::sum(work), mx::array(0.0f)));
  }
};

TEST_P(BatchGeneratorBeside, AnInterruptEndsTheWaitAndTheStepIsReadAtTheNextCall) {
  SlowModel model;
  BatchGenerator gen(model, options());
  auto a = gen.insert(requests({{{0, 1}, 12}}))[0];
  std::map<int, std::vector<int32_t>> got;
  for (int k = 0; k < 2; ++k)
    for (const auto& r : tokens(gen)) got[r.uid].push_back(r.token);
  bool arrived = true;
  gen.set_interrupt([&] { return arrived; });
  // A call that finds its step still running ends at once with nothing; the call after it
  // dispatches nothing before it has read that step.
  bool interrupted = false;
  for (int k = 0; k < 5 && !interrupted; ++k) {
    auto generated = gen.next().second;
    interrupted = generated.empty();
    for (const auto& r : generated) got[r.uid].push_back(r.token);
  }
  ASSERT_TRUE(interrupted);
  const int calls = model.calls();
  for (const auto& r : gen.next().second) got[r.uid].push_back(r.token);
  EXPECT_EQ(model.calls(), calls) << "no step dispatched while the last one is unread";
  arrived = false;
  got = drain(gen, got);
  EXPECT_EQ(got[a], (std::vector<int32_t>{2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6}));
}

TEST_P(BatchGeneratorBeside, PromptsSubmittedTogetherTakeTheInOrderPath) {
  const std::vector<std::pair<std::vector<int32_t>, int>> specs = {{{0, 1, 2}, 3}, {{3, 4}, 5}, {{5, 6}, 2}};
  const auto in_order = run_all(prompts_first(), specs), ours = run_all(options(), specs);
  EXPECT_EQ(ours.rows, in_order.rows);
  EXPECT_EQ(ours.tokens, in_order.tokens);
}

INSTANTIATE_TEST_SUITE_P(Streams, BatchGeneratorBeside, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) { return info.param ? "Interleaved" : "OwnStream"; });

}  // namespace
}  // namespace mlxrt::generate
