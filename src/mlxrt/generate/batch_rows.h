#pragma once
// Small helpers the batch generator's two files share (batch_generator.cpp, batch_generator_beside.cpp).
#include <chrono>
#include <utility>
#include <vector>

namespace mlxrt::generate::batch_rows {

/** The elements of v at `keep`, in that order (moved out of v). */
template <class T>
std::vector<T> pick(std::vector<T>& v, const std::vector<int>& keep) {
  std::vector<T> out;
  out.reserve(keep.size());
  for (int i : keep) out.push_back(std::move(v[i]));
  return out;
}

using Clock = std::chrono::steady_clock;
inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace mlxrt::generate::batch_rows
