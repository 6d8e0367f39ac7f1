#pragma once
// What the CPU matmul tests share: a matmul's shape and element type, and an array's bytes.
#include <string>
#include <vector>

#include <mlx/mlx.h>

namespace mlxrt::kernels::test {

namespace mx = mlx::core;

/** x [rows, k] @ w.T for w [n, k], quantized to `bits` with groups of `group`, in `dtype`. */
struct Case {
  int rows, n, k, bits, group;
  mx::Dtype dtype;
};

inline std::string describe(const Case& c) {
  return "rows " + std::to_string(c.rows) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) + " bits " +
         std::to_string(c.bits) + " group " + std::to_string(c.group) + " dtype " +
         (c.dtype == mx::float32 ? "float32" : c.dtype == mx::bfloat16 ? "bfloat16" : "float16");
}

/** The array's values as float32, row-major. */
inline std::vector<float> floats_of(const mx::array& a) {
  auto f = mx::astype(a, mx::float32);
  mx::eval(f);
  return std::vector<float>(f.data<float>(), f.data<float>() + f.size());
}

/** The array's bytes, row-major. */
inline std::vector<char> bytes_of(mx::array a) {
  a = mx::contiguous(a);
  mx::eval(a);
  const char* p = static_cast<const char*>(a.data<void>());
  return std::vector<char>(p, p + a.nbytes());
}

}  // namespace mlxrt::kernels::test
