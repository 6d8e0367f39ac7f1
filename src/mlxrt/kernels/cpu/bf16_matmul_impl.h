#pragma once
// The body of the CPU bfloat16 matmul (x @ w.T, and addmm's + bias), written once over a vector
// type as affine_qmm_impl.h is, and included only by the instruction-set files.
//
// What it must reproduce: MLX 0.32.4's `simd_gemm<bfloat16_t, float>`
// (mlx/backend/cpu/gemms/simd_gemm.h), which the Linux x86-64 wheel runs for every bfloat16
// matmul with simd::max_size<float> 1: for each output a float sum from 0, in order of k, of
// float(x) * float(w), each product rounded to float and added (no FMA in the library); then
// bfloat16(1.0f * sum) for a matmul, bfloat16(1.0f * sum + 1.0f * float(bias)) for addmm with
// alpha = beta = 1. The 16 x 16 blocks it walks do not change that order. A bfloat16 NaN has one
// encoding (0x7FC0), so no NaN sign needs reproducing here. Compiled with -ffp-contract=off.
//
// aarch64: the same simd_gemm, built with contraction: sum = fma(x, w, sum) (V::fma where
// fuses_multiply_add<V>(), affine_qmm_impl.h). A product of two bfloat16 values is exact in float
// unless it falls below float's normal range, so fused and unfused sums differ only there; the
// alpha and beta multiplications by 1 are exact either way.

#include <cstdint>
#include <cstring>

#include "mlxrt/kernels/cpu/affine_qmm_args.h"
#include "mlxrt/kernels/cpu/affine_qmm_impl.h"  // fuses_multiply_add

namespace mlxrt::kernels::cpu::detail {

template <class V>
struct Bf16Matmul {
  using F = typename V::F;
  using I = typename V::I;
  static constexpr int W = V::kWidth;
  static constexpr int kVectorsPerUnit = kColumnsPerUnit / W;
  static constexpr int kTileRows = 4;
  static constexpr int kTileVectors = 4;

  const Bf16MatmulArgs& a;
  explicit Bf16Matmul(const Bf16MatmulArgs& args) : a(args) {}

  static float to_float(std::uint16_t h) {
    const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }

  // _MLX_BFloat16(float) on one value.
  static std::uint16_t to_bf16(float f) {
    if (f != f) return 0x7FC0;
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    u += ((u >> 16) & 1u) + 0x7FFFu;
    return static_cast<std::uint16_t>(u >> 16);
  }

  // Byte offsets of the weight rows of the W columns from c (columns past n repeat n - 1).
  I row_bytes(int c) const {
    int offsets[W];
    for (int l = 0; l < W; ++l) offsets[l] = (c + l < a.n ? c + l : a.n - 1) * a.k * 2;
    return V::loadi(offsets);
  }

  // The weights at k of the W columns whose rows start at `rows`, as float. Reads the 32-bit word
  // holding element k: elements k and k + 1, or k - 1 and k for the last element of a row.
  F weights_at(I rows, int k) const {
    if (k + 1 < a.k || k == 0) {
      const I word = V::gather_bytes(reinterpret_cast<const char*>(a.w) + 2 * static_cast<long long>(k), rows);
      return V::low_bf16(word);
    }
    const I word = V::gather_bytes(reinterpret_cast<const char*>(a.w) + 2 * static_cast<long long>(k - 1), rows);
    return V::high_bf16(word);
  }

  template <int kRows>
  void store_tile(const F (&acc)[kRows][kTileVectors], int r0, int c0, int vec0) const {
    for (int r = 0; r < kRows; ++r)
      for (int v = 0; v < kTileVectors; ++v) {
        float lanes[W];
        V::store(lanes, acc[r][v]);
        const int cbase = c0 + (vec0 + v) * W;
        for (int l = 0; l < W && cbase + l < a.n; ++l) {
          const int c = cbase + l;
          float y = 1.0f * lanes[l];
          if (a.bias) y = y + 1.0f * to_float(a.bias[c]);
          a.out[static_cast<long long>(r0 + r) * a.n + c] = to_bf16(y);
        }
      }
  }

  // sum += x * w for the tile's rows and column vectors, at position k.
  template <int kRows>
  static void step(F (&acc)[kRows][kTileVectors], const F (&wv)[kTileVectors], const float* xf, long long k, int stride) {
    MLXRT_L1_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const F xb = V::set1(xf[r * static_cast<long long>(stride) + k]);
      MLXRT_L1_UNROLL
      for (int v = 0; v < kTileVectors; ++v) {
        if constexpr (fuses_multiply_add<V>())
          acc[r][v] = V::fma(acc[r][v], xb, wv[v]);
        else
          acc[r][v] = V::add(acc[r][v], V::mul(xb, wv[v]));
      }
    }
  }

  // Few rows (decode): the weights straight from memory into registers.
  template <int kRows>
  void direct_tile(const float* xf, int r0, int c0, int vec0) const {
    I rows[kTileVectors];
    for (int v = 0; v < kTileVectors; ++v) rows[v] = row_bytes(c0 + (vec0 + v) * W);
    F acc[kRows][kTileVectors];
    MLXRT_L1_UNROLL
    for (int r = 0; r < kRows; ++r) {
      MLXRT_L1_UNROLL
      for (int v = 0; v < kTileVectors; ++v) acc[r][v] = V::zero();
    }
    int k = 0;
    for (; k + 1 < a.k; k += 2) {
      F lo[kTileVectors], hi[kTileVectors];
      MLXRT_L1_UNROLL
      for (int v = 0; v < kTileVectors; ++v) {
        const I word = V::gather_bytes(reinterpret_cast<const char*>(a.w) + 2 * static_cast<long long>(k), rows[v]);
        lo[v] = V::low_bf16(word);
        hi[v] = V::high_bf16(word);
      }
      step<kRows>(acc, lo, xf, k, a.k);
      step<kRows>(acc, hi, xf, k + 1, a.k);
    }
    for (; k < a.k; ++k) {
      F wv[kTileVectors];
      MLXRT_L1_UNROLL
      for (int v = 0; v < kTileVectors; ++v) wv[v] = weights_at(rows[v], k);
      step<kRows>(acc, wv, xf, k, a.k);
    }
    store_tile<kRows>(acc, r0, c0, vec0);
  }

  // Many rows: the unit's columns as float once (wf[k][kColumnsPerUnit]), then every row tile.
  template <int kRows>
  void buffered_tile(const float* xf, const float* wf, int r0, int c0, int vec0) const {
    F acc[kRows][kTileVectors];
    MLXRT_L1_UNROLL
    for (int r = 0; r < kRows; ++r) {
      MLXRT_L1_UNROLL
      for (int v = 0; v < kTileVectors; ++v) acc[r][v] = V::zero();
    }
    for (int k = 0; k < a.k; ++k) {
      F wv[kTileVectors];
      MLXRT_L1_UNROLL
      for (int v = 0; v < kTileVectors; ++v) wv[v] = V::load(wf + static_cast<long long>(k) * kColumnsPerUnit + (vec0 + v) * W);
      step<kRows>(acc, wv, xf, k, a.k);
    }
    store_tile<kRows>(acc, r0, c0, vec0);
  }

  void unit(int u, float* scratch) const {
    const int column_units = (a.n + kColumnsPerUnit - 1) / kColumnsPerUnit;
    const int r0 = (u / column_units) * kRowsPerUnit;
    const int c0 = (u % column_units) * kColumnsPerUnit;
    const int nrows = a.rows - r0 < kRowsPerUnit ? a.rows - r0 : kRowsPerUnit;
    float* wf = scratch;
    float* xf = scratch + static_cast<long long>(a.k) * kColumnsPerUnit;
    const long long xbase = static_cast<long long>(r0) * a.k;
    for (long long i = 0; i < static_cast<long long>(nrows) * a.k; ++i) xf[i] = to_float(a.x[xbase + i]);
    if (nrows > kTileRows) {
      for (int v = 0; v < kVectorsPerUnit; ++v) {
        const I rows = row_bytes(c0 + v * W);
        for (int k = 0; k < a.k; ++k) V::store(wf + static_cast<long long>(k) * kColumnsPerUnit + v * W, weights_at(rows, k));
      }
    }
    for (int vec0 = 0; vec0 < kVectorsPerUnit && c0 + vec0 * W < a.n; vec0 += kTileVectors) {
      if (nrows <= kTileRows) {
        switch (nrows) {
          case 4: direct_tile<4>(xf, r0, c0, vec0); break;
          case 3: direct_tile<3>(xf, r0, c0, vec0); break;
          case 2: direct_tile<2>(xf, r0, c0, vec0); break;
          default: direct_tile<1>(xf, r0, c0, vec0); break;
        }
        continue;
      }
      int r = 0;
      for (; r + kTileRows <= nrows; r += kTileRows)
        buffered_tile<kTileRows>(xf + static_cast<long long>(r) * a.k, wf, r0 + r, c0, vec0);
      switch (nrows - r) {
        case 3: buffered_tile<3>(xf + static_cast<long long>(r) * a.k, wf, r0 + r, c0, vec0); break;
        case 2: buffered_tile<2>(xf + static_cast<long long>(r) * a.k, wf, r0 + r, c0, vec0); break;
        case 1: buffered_tile<1>(xf + static_cast<long long>(r) * a.k, wf, r0 + r, c0, vec0); break;
        default: break;
      }
    }
  }
};

template <class V>
void run_bf16_units(const Bf16MatmulArgs& a, int begin, int end, float* scratch) {
  const Bf16Matmul<V> kernel(a);
  for (int u = begin; u < end; ++u) kernel.unit(u, scratch);
}

}  // namespace mlxrt::kernels::cpu::detail
