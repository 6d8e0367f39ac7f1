// PacedDispatch cuts a lazy graph into pieces, keeps at most `pieces_ahead` of them on the device,
// and computes the same bytes as one evaluation of the whole graph.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <mlx/mlx.h>

#include "mlxrt/generate/paced_dispatch.h"

namespace mlxrt::generate {
namespace {

// A chain of `n` products and softmaxes over one random input, with a branch off every third link
// that the chain's end does not read until the last add: pieces then hold ops the cut does not need.
std::vector<mx::array> graph(int n) {
  auto key = mx::random::key(7);
  auto x = mx::random::normal({96, 96}, mx::float32, 0.0f, 1.0f, key);
  auto w = mx::random::normal({96, 96}, mx::float32, 0.0f, 0.1f, mx::random::split(key).first);
  auto side = mx::zeros({96, 96});
  for (int i = 0; i < n; ++i) {
    x = mx::softmax(mx::matmul(x, w), -1);
    if (i % 3 == 0) side = mx::add(side, mx::exp(x));
  }
  return {mx::add(x, side), mx::sum(x)};
}

bool same_bytes(const mx::array& a, const mx::array& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data<char>(), b.data<char>(), a.nbytes()) == 0;
}

TEST(PacedDispatch, PiecesComputeTheBytesOfOneEvaluation) {
  auto whole = graph(40);
  mx::eval(whole);
  auto paced_outputs = graph(40);
  PacedDispatch paced(/*ops_per_piece=*/7, /*pieces_ahead=*/2);
  paced.queue(paced_outputs);
  EXPECT_GT(paced.pieces_queued(), 10) << "a graph of over a hundred ops in pieces of seven";
  while (!paced.drained()) {
    paced.pump();
    EXPECT_LE(paced.running(), 2u);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  mx::eval(paced_outputs);
  ASSERT_EQ(paced_outputs.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_TRUE(same_bytes(paced_outputs[i], whole[i])) << "output " << i;
}

TEST(PacedDispatch, OnlyPumpDispatchesAndTheLastPieceIsTheOutputs) {
  auto outputs = graph(6);
  PacedDispatch paced(5, 1);
  paced.queue(outputs);
  for (const auto& o : outputs) EXPECT_EQ(o.status(), mx::array::unscheduled) << "queue() dispatches nothing";
  while (!paced.drained()) paced.pump();
  for (const auto& o : outputs) EXPECT_NE(o.status(), mx::array::unscheduled);
  mx::eval(outputs);
}

TEST(PacedDispatch, WhatIsScheduledAlreadyIsNotCutAgain) {
  auto first = graph(9);
  std::vector<mx::array> second = {mx::multiply(first[1], mx::array(2.0f))};  // reads the first graph's output
  mx::async_eval(first[1]);  // scheduled before: not cut again, only waited for
  PacedDispatch paced(4, 3);
  paced.queue(first);
  const long after_first = paced.pieces_queued();
  paced.queue(second);
  EXPECT_EQ(paced.pieces_queued(), after_first + 1) << "one op past what is queued: the outputs alone";
  paced.flush();
  EXPECT_TRUE(paced.drained());
  mx::eval(first);
  mx::eval(second);
  EXPECT_EQ(second[0].item<float>(), 2.0f * first[1].item<float>());
}

TEST(PacedDispatch, WaitEndsWhenAPieceIsDoneOnTheCpu) {
  auto outputs = graph(30);
  PacedDispatch paced(/*ops_per_piece=*/40, /*pieces_ahead=*/1);
  paced.queue(outputs);
  paced.pump();
  ASSERT_EQ(paced.running(), 1u);
  const auto t0 = std::chrono::steady_clock::now();
  paced.wait(std::chrono::seconds(30));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15)) << "woken by the piece, not the timeout";
  paced.flush();
  mx::eval(outputs);
}

}  // namespace
}  // namespace mlxrt::generate
