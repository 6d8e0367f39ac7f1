#pragma once
/** The plain-data call of the CPU affine quantized matmul kernels (affine_qmm.h): what the
 * instruction-set files see. Nothing here may pull in a header with inline functions, since those
 * files are compiled with wider instruction sets than the rest of the program. */
#include <cstdint>

namespace mlxrt::kernels::cpu {

/** The element type of x, scales, biases and the output (MLX's promoted type). */
enum class QmmElem : std::uint8_t { f32, bf16, f16 };

/** out[r][n] = sum over k of x[r][k] * dequantized w[n][k], every buffer row-contiguous:
 * x rows × k, w n × k·bits/32 words, scales and biases n × k/group_size, out rows × n. */
struct AffineQmmArgs {
  void* out = nullptr;
  const void* x = nullptr;
  const std::uint32_t* w = nullptr;
  const void* scales = nullptr;
  const void* biases = nullptr;
  int rows = 0;
  int n = 0;
  int k = 0;
  int bits = 0;
  int group_size = 0;
  QmmElem elem = QmmElem::f32;
};

/** Output columns one work unit covers; a call is split into units of this many columns (the last
 * may be short) and, for many rows, kRowsPerUnit rows. */
constexpr int kColumnsPerUnit = 64;
constexpr int kRowsPerUnit = 64;

/** Computes the units [begin, end) of `a` (numbered column-major: unit u covers row block
 * u / column_units and column block u % column_units). `scratch` holds at least
 * scratch_floats(a) floats. One function per instruction set. */
void affine_qmm_units_avx512(const AffineQmmArgs& a, int begin, int end, float* scratch);
void affine_qmm_units_avx2(const AffineQmmArgs& a, int begin, int end, float* scratch);
void affine_qmm_units_neon(const AffineQmmArgs& a, int begin, int end, float* scratch);

/** Floats of scratch one thread needs for `a`: the dequantized columns of one unit and x's rows
 * of one unit as float. */
inline long long scratch_floats(const AffineQmmArgs& a) {
  return static_cast<long long>(a.k) * kColumnsPerUnit + static_cast<long long>(a.k) * kRowsPerUnit;
}

}  // namespace mlxrt::kernels::cpu

namespace mlxrt::kernels::cpu {

/** out[r][n] = x[r] · w[n] (+ bias[n]) over bfloat16 buffers, row-contiguous: x rows × k, w n × k,
 * bias n (or null), out rows × n. */
struct Bf16MatmulArgs {
  std::uint16_t* out = nullptr;
  const std::uint16_t* x = nullptr;
  const std::uint16_t* w = nullptr;
  const std::uint16_t* bias = nullptr;
  int rows = 0;
  int n = 0;
  int k = 0;
};

/** As affine_qmm_units_*, for Bf16MatmulArgs (units numbered the same way). */
void bf16_matmul_units_avx512(const Bf16MatmulArgs& a, int begin, int end, float* scratch);
void bf16_matmul_units_avx2(const Bf16MatmulArgs& a, int begin, int end, float* scratch);
void bf16_matmul_units_neon(const Bf16MatmulArgs& a, int begin, int end, float* scratch);

inline long long scratch_floats(const Bf16MatmulArgs& a) {
  return static_cast<long long>(a.k) * kColumnsPerUnit + static_cast<long long>(a.k) * kRowsPerUnit;
}

}  // namespace mlxrt::kernels::cpu
