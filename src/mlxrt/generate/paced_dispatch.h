// PacedDispatch: a lazy graph dispatched to the device a piece at a time, never more than a few
// pieces ahead of what the device has finished.
//
// Why: mx::async_eval hands a whole batch step to the device's queue at once, and the device runs
// its queue in order, so work dispatched after it (a joining request's prefill) waits for the
// whole step. Cut into pieces and kept at most `pieces_ahead` pieces ahead, the queue holds a few
// milliseconds of the step, and other work dispatched meanwhile runs after those pieces instead of
// after the step (BatchGeneratorOptions::join_prefill_interleaved). Each op still runs once, on the
// same inputs, with the same kernel: only the order of independent ops changes, so the bytes are
// those of one async_eval.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include <mlx/array.h>

namespace mlxrt::generate {

namespace mx = mlx::core;

class PacedDispatch {
 public:
  /** Pieces of about `ops_per_piece` ops (at least 1), at most `pieces_ahead` (at least 1)
   * dispatched and not yet computed. */
  PacedDispatch(int ops_per_piece, int pieces_ahead);

  /** Cuts the graph of `outputs` not yet scheduled into pieces, queued after what is queued; the
   * last piece is `outputs` themselves. Nothing is dispatched here (pump() does). */
  void queue(const std::vector<mx::array>& outputs);
  /** Dispatches queued pieces while fewer than `ahead` (default: pieces_ahead) of the dispatched
   * ones are still being computed. Never waits (except where the backend makes the host wait to
   * queue work: MLX's CPU backend holds it to a few ops ahead). */
  void pump() { pump(pieces_ahead_); }
  void pump(size_t ahead);
  /** Dispatches everything queued at once. */
  void flush();
  /** No piece is left to dispatch. */
  bool drained() const { return queued_.empty(); }
  /** Pieces queued so far in all (for tests and logs). */
  long pieces_queued() const { return pieces_queued_; }
  /** Dispatched pieces not seen computed at the last pump(): never more than pieces_ahead. */
  size_t running() const { return running_.size(); }
  /** Returns once a dispatched piece may have been computed since the last pump(), or after
   * `timeout`. On the CPU the stream's thread says when each piece is done, so the host wakes as
   * the device runs out of work rather than a polling interval later; elsewhere it sleeps. */
  void wait(std::chrono::microseconds timeout);

 private:
  // Pieces the CPU stream's thread has finished, counted by a task queued behind each.
  struct Progress {
    std::mutex mutex;
    std::condition_variable done_cv;
    std::uint64_t done = 0;
  };

  int ops_per_piece_;
  size_t pieces_ahead_;
  std::deque<std::vector<mx::array>> queued_;
  std::deque<mx::array> running_;  // one array of each dispatched piece, until it is computed
  long pieces_queued_ = 0;
  std::shared_ptr<Progress> progress_ = std::make_shared<Progress>();  // shared with the queued tasks
  std::uint64_t dispatched_on_cpu_ = 0;  // pieces dispatched with a task behind them
  std::uint64_t seen_done_ = 0;          // progress_->done at the last pump
};

}  // namespace mlxrt::generate
