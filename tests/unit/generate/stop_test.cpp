// StopSequences and TextStateMachine against mlx-lm 0.32.2: the expected values below are what
// mlx_lm.generate's StopSequences / TextStateMachine return for the same inputs.
#include <gtest/gtest.h>

#include "mlxrt/generate/stop.h"

namespace mlxrt::generate {
namespace {

using Segs = std::vector<std::pair<std::optional<std::string>, std::string>>;

Segs split(const TextStateMachine& sm, TextStateMachine::State& st, const std::string& text) {
  Segs out;
  for (auto& s : sm.split(st, text)) out.emplace_back(s.state, s.text);
  return out;
}

TextStateMachine machine() {
  TextStateMachine::Transitions t;
  t["normal"] = {{"STOP", std::string("normal")}, {"<think>", std::string("reasoning")}, {"</s>", std::nullopt}};
  t["reasoning"] = {{"</think>", std::string("normal")}};
  return TextStateMachine(t);
}

const std::optional<std::string> normal = std::string("normal");
const std::optional<std::string> reasoning = std::string("reasoning");

TEST(TextStateMachine, StripsAStopWordSplitAcrossChunks) {
  auto sm = machine();
  auto st = sm.make_state();
  EXPECT_EQ(split(sm, st, "Hello ST"), (Segs{{normal, "Hello "}}));
  EXPECT_EQ(split(sm, st, "OP world"), (Segs{{normal, ""}, {normal, " world"}}));
  EXPECT_EQ(sm.flush(st), "");
}

TEST(TextStateMachine, FollowsStateTransitions) {
  auto sm = machine();
  auto st = sm.make_state();
  EXPECT_EQ(split(sm, st, "a<thi"), (Segs{{normal, "a"}}));
  EXPECT_EQ(split(sm, st, "nk>deep</th"), (Segs{{normal, ""}, {reasoning, "deep"}}));
  EXPECT_EQ(split(sm, st, "ink>done"), (Segs{{reasoning, ""}, {normal, "done"}}));
}

TEST(TextStateMachine, ReleasesAFailedPartialMatch) {
  auto sm = machine();
  auto st = sm.make_state();
  EXPECT_EQ(split(sm, st, "xS"), (Segs{{normal, "x"}}));
  EXPECT_EQ(split(sm, st, "TOSTOP"), (Segs{{normal, "STO"}, {normal, ""}}));
  EXPECT_EQ(split(sm, st, "y"), (Segs{{normal, "y"}}));
}

TEST(TextStateMachine, EndStateKeepsTheRest) {
  auto sm = machine();
  auto st = sm.make_state();
  EXPECT_EQ(split(sm, st, "end</s>tail"), (Segs{{normal, "end"}, {std::nullopt, ""}}));
  EXPECT_EQ(sm.flush(st), "tail");
}

TEST(TextStateMachine, HoldsBackAPrefixOverMultibyteText) {
  auto sm = machine();
  auto st = sm.make_state();
  EXPECT_EQ(split(sm, st, "h\xc3\xa9llo w\xc3\xb6rld ST"), (Segs{{normal, "h\xc3\xa9llo w\xc3\xb6rld "}}));
  EXPECT_EQ(sm.flush(st), "ST");
  auto st2 = sm.make_state();
  EXPECT_EQ(split(sm, st2, "<th"), (Segs{{normal, ""}}));
  sm.discard(st2);
  EXPECT_EQ(sm.flush(st2), "");
}

TEST(StopSequences, MatchesLikeMlxLm) {
  StopSequences ss({{5}, {1, 2, 3}, {2, 3, 4, 9}, {7, 7}});
  auto run = [&](std::vector<int32_t> seq) {
    auto m = ss.matcher();
    std::vector<bool> out;
    for (auto t : seq) out.push_back(m.advance(t));
    return out;
  };
  EXPECT_EQ(run({1, 2, 3}), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(run({2, 3, 4, 9}), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(run({1, 2, 3, 4}), (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(run({7, 1, 7, 7}), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(run({2, 3, 4, 8, 5}), (std::vector<bool>{false, false, false, false, true}));
}

TEST(StopSequences, EmptySequenceNeverMatches) {
  StopSequences ss({{}, {4}});
  auto m = ss.matcher();
  EXPECT_FALSE(m.advance(1));
  EXPECT_TRUE(m.advance(4));
}

}  // namespace
}  // namespace mlxrt::generate
