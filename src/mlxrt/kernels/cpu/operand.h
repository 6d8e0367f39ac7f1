#pragma once
/** An MLX array's data as the CPU kernels read it (row-contiguous where they need it). */
#include <cstdint>
#include <cstring>
#include <vector>

#include <mlx/allocator.h>
#include <mlx/array.h>
#include <mlx/backend/cpu/encoder.h>
#include <mlx/types/half_types.h>

namespace mlxrt::kernels::cpu::detail {

namespace mx = mlx::core;

/** A row-contiguous copy of an input MLX gave us strided (MLX's kernels copy such inputs too). */
std::vector<char> dense_copy(const mx::array& a);

// An input as the kernel reads it: its data with the strides of each dimension, in elements.
// `dense_last` dimensions must be row-contiguous, or the whole array is copied row-major first.
struct Operand {
  const char* data;
  mx::Shape shape;
  mx::Strides strides;
  std::vector<char> copy;

  Operand(const mx::array& a, int dense_last) : data(static_cast<const char*>(a.data<void>())), shape(a.shape()),
                                                strides(a.strides()) {
    bool dense = true;
    int64_t expect = 1;
    for (int d = static_cast<int>(a.ndim()) - 1; d >= static_cast<int>(a.ndim()) - dense_last && d >= 0; --d) {
      if (shape[static_cast<size_t>(d)] != 1 && strides[static_cast<size_t>(d)] != expect) dense = false;
      expect *= shape[static_cast<size_t>(d)];
    }
    if (dense) return;
    copy = dense_copy(a);
    data = copy.data();
    int64_t stride = 1;
    for (int d = static_cast<int>(a.ndim()) - 1; d >= 0; --d) {
      strides[static_cast<size_t>(d)] = stride;
      stride *= shape[static_cast<size_t>(d)];
    }
  }

  // The offset (elements) of row-major flat index i, as MLX's elem_to_loc.
  int64_t offset(int64_t i) const {
    int64_t at = 0;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0 && i > 0; --d) {
      const int64_t n = shape[static_cast<size_t>(d)];
      at += (i % n) * strides[static_cast<size_t>(d)];
      i /= n;
    }
    return at;
  }
};

/** Element i of a float32, bfloat16 or float16 buffer, as float. */
inline float load_float(const char* data, mx::Dtype t, long long i) {
  if (t == mx::float32) {
    float f;
    std::memcpy(&f, data + i * 4, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, data + i * 2, 2);
  if (t == mx::bfloat16) {
    const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  mx::float16_t v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

/** Stores f at element i of a float32, bfloat16 or float16 buffer, rounded as MLX rounds. */
inline void store_float(char* data, mx::Dtype t, long long i, float f) {
  if (t == mx::float32) {
    std::memcpy(data + i * 4, &f, 4);
  } else if (t == mx::bfloat16) {
    const mx::bfloat16_t v(f);
    std::memcpy(data + i * 2, &v, 2);
  } else {
    const mx::float16_t v(f);
    std::memcpy(data + i * 2, &v, 2);
  }
}

/** Allocates `out` and schedules fn(out, inputs) on `stream`'s CPU encoder, as MLX's CPU primitives
 * do (the arrays captured as weak copies: the graph keeps them alive until it has run). */
template <class Fn>
void schedule_on_cpu(mx::Stream stream, const std::vector<mx::array>& inputs, mx::array& out, Fn fn) {
  out.set_data(mx::allocator::malloc(out.nbytes()));
  if (out.size() == 0) return;
  std::vector<mx::array> in;
  for (const auto& a : inputs) in.push_back(mx::array::unsafe_weak_copy(a));
  mx::cpu::get_command_encoder(stream).dispatch(
      [out = mx::array::unsafe_weak_copy(out), in = std::move(in), fn]() mutable { fn(out, in); });
}

}  // namespace mlxrt::kernels::cpu::detail
