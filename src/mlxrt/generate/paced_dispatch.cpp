#include "mlxrt/generate/paced_dispatch.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <thread>
#include <unordered_set>
#include <utility>

#include <mlx/primitives.h>
#include <mlx/scheduler.h>
#include <mlx/transforms.h>

namespace mlxrt::generate {

PacedDispatch::PacedDispatch(int ops_per_piece, int pieces_ahead)
    : ops_per_piece_(std::max(1, ops_per_piece)), pieces_ahead_(static_cast<size_t>(std::max(1, pieces_ahead))) {}

void PacedDispatch::queue(const std::vector<mx::array>& outputs) {
  // A post-order walk of the unscheduled graph (each op after its inputs, as a topological order):
  // every ops_per_piece-th op ends a piece. Evaluating a piece's last op evaluates what it needs
  // of the ops before it; what it does not need goes with a later piece.
  std::unordered_set<std::uintptr_t> seen;
  std::vector<std::pair<mx::array, size_t>> stack;  // an array and the next of its inputs to visit
  int ops = 0;
  for (const auto& out : outputs) {
    if (out.status() != mx::array::unscheduled || !out.has_primitive() || !seen.insert(out.id()).second) continue;
    stack.emplace_back(out, 0);
    while (!stack.empty()) {
      auto& [a, next] = stack.back();
      if (next < a.inputs().size()) {
        const mx::array in = a.inputs()[next++];  // a copy: the push below may move `a`
        if (in.status() == mx::array::unscheduled && in.has_primitive() && seen.insert(in.id()).second) {
          for (const auto& s : in.siblings()) seen.insert(s.id());
          stack.emplace_back(in, 0);
        }
        continue;
      }
      if (++ops % ops_per_piece_ == 0) {
        queued_.push_back({a});
        ++pieces_queued_;
      }
      stack.pop_back();
    }
  }
  queued_.push_back(outputs);
  ++pieces_queued_;
}

void PacedDispatch::pump(size_t ahead) {
  // One array of a piece stands for all of it: async_eval gives every array it schedules the
  // same event (one already computed is available at once and is dropped at the next look).
  const auto drop_computed = [&] {
    while (!running_.empty() && running_.front().is_available()) running_.pop_front();
  };
  {
    std::lock_guard lock(progress_->mutex);
    seen_done_ = progress_->done;
  }
  drop_computed();
  while (!queued_.empty() && running_.size() < ahead) {
    auto piece = std::move(queued_.front());
    queued_.pop_front();
    if (piece.empty()) continue;
    // The CPU stream the piece runs on, if it does, read before async_eval schedules it.
    std::optional<mx::Stream> cpu_stream;
    if (const auto& first = piece.front(); first.has_primitive() && first.status() == mx::array::unscheduled &&
                                           first.primitive().stream().device == mx::Device::cpu)
      cpu_stream = first.primitive().stream();
    mx::async_eval(piece);
    if (cpu_stream) {
      // Runs on the stream's thread after the piece's ops (a CPU stream runs its tasks in order).
      mx::scheduler::enqueue(*cpu_stream, [progress = progress_] {
        {
          std::lock_guard lock(progress->mutex);
          ++progress->done;
        }
        progress->done_cv.notify_all();
      });
      ++dispatched_on_cpu_;
    }
    running_.push_back(piece.front());
    drop_computed();
  }
}

void PacedDispatch::wait(std::chrono::microseconds timeout) {
  std::unique_lock lock(progress_->mutex);
  if (progress_->done != seen_done_) return;  // a piece finished since the last pump
  if (progress_->done < dispatched_on_cpu_) {
    progress_->done_cv.wait_for(lock, timeout, [&] { return progress_->done != seen_done_; });
    return;
  }
  // Nothing in flight whose task would wake us.
  lock.unlock();
  std::this_thread::sleep_for(timeout);
}

void PacedDispatch::flush() {
  while (!queued_.empty()) {
    mx::async_eval(queued_.front());
    queued_.pop_front();
  }
  running_.clear();
}

}  // namespace mlxrt::generate
