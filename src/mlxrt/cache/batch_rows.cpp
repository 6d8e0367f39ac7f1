// The parts of BatchKVCache and BatchRotatingKVCache (mlx_lm/models/cache.py, mlx-lm 0.32.2) that
// are the same in both: extend's padding and joining of rows.
#include "mlxrt/cache/batch_rows.h"

#include <algorithm>
#include <utility>

#include <mlx/ops.h>
#include <mlx/transforms.h>

namespace mlxrt::cache::batch_rows {

mx::array int_array(const std::vector<int>& v) {
  return mx::array(v.data(), {static_cast<int>(v.size())}, mx::int32);
}

mx::array positions(const mx::array& a, int start, int stop) {
  mx::Shape lo(a.ndim(), 0), hi = a.shape();
  lo[2] = start;
  hi[2] = stop;
  return mx::slice(a, lo, hi);
}

std::vector<int> to_ints(const mx::array& a) {
  auto c = mx::astype(a, mx::int32);
  mx::eval(c);
  const int32_t* p = c.data<int32_t>();
  return std::vector<int>(p, p + c.size());
}

Rows join(const Rows& a, const Rows& b) {
  if (!a.keys && !b.keys)
    return Rows{std::nullopt, std::nullopt, mx::concatenate({a.offset, b.offset}, 0),
                mx::concatenate({a.left_padding, b.left_padding}, 0), a.idx};
  const int max_idx = std::max(a.idx, b.idx);
  int L1 = 0, L2 = 0, H = 0, D = 0, M = 0;
  if (a.keys) {
    H = a.keys->shape(1);
    L1 = a.keys->shape(2);
    D = a.keys->shape(3);
    M = a.values->shape(3);
  }
  if (b.keys) {
    H = b.keys->shape(1);
    L2 = b.keys->shape(2);
    D = b.keys->shape(3);
    M = b.values->shape(3);
  }
  const int max_size = std::max(L1, L2);
  const auto dtype = (a.keys ? *a.keys : *b.keys).dtype();
  auto pad = [&](const Rows& c) {
    mx::array k = c.keys ? *c.keys : mx::zeros({c.offset.shape(0), H, 0, D}, dtype);
    mx::array v = c.values ? *c.values : mx::zeros({c.offset.shape(0), H, 0, M}, dtype);
    const int left = max_idx - c.idx;
    int right = max_size - k.shape(2) - left;
    if (right < 0) {
      k = positions(k, 0, k.shape(2) + right);
      v = positions(v, 0, v.shape(2) + right);
      right = 0;
    }
    if (left != 0 || right != 0) {
      std::vector<std::pair<int, int>> widths = {{0, 0}, {0, 0}, {left, right}, {0, 0}};
      k = mx::pad(k, widths);
      v = mx::pad(v, widths);
    }
    return Rows{k, v, c.offset, mx::add(c.left_padding, mx::array(left)), c.idx};
  };
  auto pa = pad(a), pb = pad(b);
  return Rows{mx::concatenate({*pa.keys, *pb.keys}, 0), mx::concatenate({*pa.values, *pb.values}, 0),
              mx::concatenate({pa.offset, pb.offset}, 0), mx::concatenate({pa.left_padding, pb.left_padding}, 0),
              max_idx};
}

std::vector<int> join_left_padding(const std::vector<int>& a, int a_idx, const std::vector<int>& b, int b_idx,
                                   bool any_keys) {
  std::vector<int> pads = a;
  pads.insert(pads.end(), b.begin(), b.end());
  if (!any_keys) return pads;
  const int max_idx = std::max(a_idx, b_idx);
  for (size_t i = 0; i < pads.size(); ++i) pads[i] += max_idx - (i < a.size() ? a_idx : b_idx);
  return pads;
}

}  // namespace mlxrt::cache::batch_rows
