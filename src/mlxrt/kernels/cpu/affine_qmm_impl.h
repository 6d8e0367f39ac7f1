#pragma once
// The body of the CPU affine quantized matmul, written once over a vector type (Vec512, Vec256
// in the instruction-set files that include this). Included only by those files, inside their
// anonymous namespace: everything here has internal linkage there.
//
// What it must reproduce, bit for bit: MLX 0.32.4's `_qmm_t<T, bits, group_size>` in
// mlx/backend/cpu/quantized.cpp, which the Linux x86-64 wheel runs for every affine quantized
// matmul (simd::max_size<T> is 1 there, so `_qmm_t_simd` is never taken; the library holds no
// FMA instruction). For each output (row r, column n), in this order:
//
//   T sum = 0;
//   for each k:  sum += x[r][k] * (scale * T(q[n][k]) + bias);
//
// with every operation done in float and rounded to T (MLX's bfloat16/float16 structs convert
// both operands to float and round the result back: round to nearest even, NaN to 0x7FC0 for
// bfloat16 and to sign | 0x7D00 for float16). The sum runs over k in order, one output per
// lane, so vectorising across outputs keeps each lane's arithmetic identical.
//
// NaNs: when both operands of an x86 add or multiply are NaN, the result is the first source's,
// and which operand is the first source was decided by the compiler that built the library, per
// instantiation and even per unrolled position. Found with crafted NaNs of both signs at every
// position k (for NaNs in x; a NaN in the scales or biases, a broken checkpoint, is not
// reproduced to its sign): the product w * x takes w first for float32 and x first for float16;
// sum + product takes the product first for float16 always, and for float32 where k % period >=
// 2, with period 32 for 2- and 4-bit weights of group size 32, 4 for 2-bit weights of larger
// groups, and never otherwise (bfloat16 has a single NaN, 0x7FC0). V::add / V::mul take their
// first source first. The files
// that include this are compiled with -ffp-contract=off: a fused multiply-add would round once
// where MLX rounds twice.
//
// aarch64 (affine_qmm_neon.cpp): MLX's Linux aarch64 wheel runs the same scalar `_qmm_t`
// (simd::max_size<T> is 1 there too: its NEON types are for Accelerate), but built with the
// compiler's default contraction, and every ARMv8-A CPU has FMA: for float32 the library computes
// w = fma(scale, q, bias) and sum = fma(x, w, sum). bfloat16 and float16 round to T between the
// operations, so nothing fuses there and the arithmetic is the x86 one. A fused multiply-add's
// NaN is its addend's first, then x's, then w's (Arm's rule); the NaN tests find MLX's bytes so.

#include <cstdint>
#include <cstring>

#include "mlxrt/kernels/cpu/affine_qmm_args.h"

// The register tile's loops unrolled, so its accumulators live in registers: GCC (-O2) otherwise
// kept them on the stack, a load and a store around every product (with a division per k for the
// NaN order), which a prefill's profile showed as most of the kernel's time.
#define MLXRT_L1_UNROLL _Pragma("GCC unroll 16")

namespace mlxrt::kernels::cpu::detail {

// Whether MLX's library on V's architecture contracts a float `a * b + c` into one fused
// multiply-add (V::kFusesMultiplyAdd, with V::fma; aarch64, see above); false where V does not say.
template <class V>
constexpr bool fuses_multiply_add() {
  if constexpr (requires { V::kFusesMultiplyAdd; }) return V::kFusesMultiplyAdd;
  return false;
}

template <class V, QmmElem E>
struct AffineQmm {
  using F = typename V::F;
  using I = typename V::I;
  static constexpr int W = V::kWidth;
  static constexpr int kVectorsPerUnit = kColumnsPerUnit / W;
  // Register tile: kTileRows rows × kTileVectors vectors of columns.
  static constexpr int kTileRows = 4;
  static constexpr int kTileVectors = 4;
  static_assert(kVectorsPerUnit % kTileVectors == 0);

  const AffineQmmArgs& a;
  const int words_per_row;  // k · bits / 32
  const int groups_per_row;
  // sum + product takes the product as first source where k % order_period >= 2 (top of file).
  const int order_period;

  explicit AffineQmm(const AffineQmmArgs& args)
      : a(args),
        words_per_row(args.k / 32 * args.bits),
        groups_per_row(args.k / args.group_size),
        order_period(args.bits == 8 || (args.bits == 4 && args.group_size > 32) ? 0
                     : args.group_size == 32                                    ? 32
                                                                                : 4) {}

  // MLX's rounding of a float result to the element type, lane by lane.
  static F round(F v) {
    if constexpr (E == QmmElem::bf16) return V::round_bf16(v);
    if constexpr (E == QmmElem::f16) return V::round_f16(v);
    return v;
  }

  // Whether sum + product takes the product as first source at a position whose k % order_period
  // is `phase` (float32). The loops keep the phase as a counter (next_phase), not a division per k.
  bool product_first_at(int phase) const { return E == QmmElem::f32 && order_period && phase >= 2; }
  int next_phase(int phase) const { return order_period && ++phase == order_period ? 0 : phase; }

  static constexpr bool kFused = E == QmmElem::f32 && fuses_multiply_add<V>();

  // sum += w * x, with MLX's first sources (see the top of this file).
  static F accumulate(F sum, F w, F x, bool product_first) {
    if constexpr (kFused) return V::fma(sum, x, w);
    if constexpr (E == QmmElem::f16) return round(V::add(round(V::mul(x, w)), sum));
    const F product = round(V::mul(w, x));
    if (product_first) return V::add(product, sum);
    return round(V::add(sum, product));
  }

  // Element i of a buffer of the element type, as float (exact).
  float element(const void* p, long long i) const {
    switch (E) {
      case QmmElem::bf16: {
        std::uint32_t u = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(p)[i]) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
      }
      case QmmElem::f16:
        return V::half_to_float(static_cast<const std::uint16_t*>(p)[i]);
      case QmmElem::f32:
        break;
    }
    return static_cast<const float*>(p)[i];
  }

  // out[i] = v (v already rounded to the element type, so the narrowing is exact).
  void store_element(long long i, float v) const {
    switch (E) {
      case QmmElem::bf16: {
        std::uint32_t u;
        std::memcpy(&u, &v, 4);
        static_cast<std::uint16_t*>(a.out)[i] = static_cast<std::uint16_t>(u >> 16);
        return;
      }
      case QmmElem::f16: {
        std::uint32_t u;
        std::memcpy(&u, &v, 4);
        static_cast<std::uint16_t*>(a.out)[i] =
            v != v ? static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | 0x7D00u) : V::float_to_half(v);
        return;
      }
      case QmmElem::f32:
        break;
    }
    static_cast<float*>(a.out)[i] = v;
  }

  // The word offsets of the weight rows of the W columns from c, and the rows themselves
  // (columns past n repeat column n - 1: computed, never stored).
  I row_offsets(int c, int (&lane_row)[W]) const {
    int word_index[W];
    for (int l = 0; l < W; ++l) {
      lane_row[l] = c + l < a.n ? c + l : a.n - 1;
      word_index[l] = lane_row[l] * words_per_row;
    }
    return V::loadi(word_index);
  }

  void group_params(const int (&lane_row)[W], int g, F& scale, F& bias) const {
    float sc[W], bi[W];
    for (int l = 0; l < W; ++l) {
      const long long at = static_cast<long long>(lane_row[l]) * groups_per_row + g;
      sc[l] = element(a.scales, at);
      bi[l] = element(a.biases, at);
    }
    scale = V::load(sc);
    bias = V::load(bi);
  }

  // Element i of a packed word as T(q), then scale * T(q) + bias, rounded as MLX rounds.
  template <int kBits>
  static F dequantize(I packed, int i, F scale, F bias) {
    const F q = V::to_float(V::and_(V::srl(packed, kBits * i), V::set1i((1 << kBits) - 1)));
    if constexpr (kFused) return V::fma(bias, scale, q);
    return round(V::add(round(V::mul(scale, q)), bias));
  }

  // Dequantizes columns [c0, c0 + kColumnsPerUnit) into wdq[k][kColumnsPerUnit] (for many rows:
  // each value is then used by every row of the unit).
  template <int kBits>
  void dequantize_columns(int c0, float* wdq) const {
    constexpr int kPerWord = 32 / kBits;
    const int words_per_group = a.group_size * kBits / 32;
    for (int v = 0; v < kVectorsPerUnit; ++v) {
      int lane_row[W];
      const I rows = row_offsets(c0 + v * W, lane_row);
      for (int g = 0; g < groups_per_row; ++g) {
        F scale, bias;
        group_params(lane_row, g, scale, bias);
        for (int j = 0; j < words_per_group; ++j) {
          const int word = g * words_per_group + j;
          const I packed = V::gather(a.w + word, rows);
          float* dst = wdq + static_cast<long long>(word) * kPerWord * kColumnsPerUnit + v * W;
          for (int i = 0; i < kPerWord; ++i) V::store(dst + i * kColumnsPerUnit, dequantize<kBits>(packed, i, scale, bias));
        }
      }
    }
  }

  template <int kRows>
  void store_tile(const F (&acc)[kRows][kTileVectors], int r0, int c0, int vec0) const {
    for (int r = 0; r < kRows; ++r)
      for (int v = 0; v < kTileVectors; ++v) {
        float lanes[W];
        V::store(lanes, acc[r][v]);
        const int cbase = c0 + (vec0 + v) * W;
        const long long obase = static_cast<long long>(r0 + r) * a.n;
        for (int l = 0; l < W && cbase + l < a.n; ++l) store_element(obase + cbase + l, lanes[l]);
      }
  }

  // acc[r][v] += wv[v] · x_r for the tile's rows, x_r = xk[r · row_stride] (one position k).
  template <int kRows, bool kProductFirst>
  static void tile_step(F (&acc)[kRows][kTileVectors], const F (&wv)[kTileVectors], const float* xk,
                        long long row_stride) {
    MLXRT_L1_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const F xb = V::set1(xk[r * row_stride]);
      MLXRT_L1_UNROLL
      for (int v = 0; v < kTileVectors; ++v) acc[r][v] = accumulate(acc[r][v], wv[v], xb, kProductFirst);
    }
  }

  template <int kRows>
  static void zero(F (&acc)[kRows][kTileVectors]) {
    MLXRT_L1_UNROLL
    for (int r = 0; r < kRows; ++r) {
      MLXRT_L1_UNROLL
      for (int v = 0; v < kTileVectors; ++v) acc[r][v] = V::zero();
    }
  }

  // Rows [r0, r0 + kRows) against the dequantized columns; xf holds those rows as float, k apart.
  template <int kRows>
  void tile(const float* xf, const float* wdq, int r0, int c0, int vec0) const {
    F acc[kRows][kTileVectors];
    zero<kRows>(acc);
    int phase = 0;
    for (int k = 0; k < a.k; ++k) {
      const float* wk = wdq + static_cast<long long>(k) * kColumnsPerUnit + vec0 * W;
      F wv[kTileVectors];
      MLXRT_L1_UNROLL
      for (int v = 0; v < kTileVectors; ++v) wv[v] = V::load(wk + v * W);
      if (product_first_at(phase))
        tile_step<kRows, true>(acc, wv, xf + k, a.k);
      else
        tile_step<kRows, false>(acc, wv, xf + k, a.k);
      phase = next_phase(phase);
    }
    store_tile<kRows>(acc, r0, c0, vec0);
  }

  // A few rows (decode): dequantize and accumulate in registers, with no buffer between.
  template <int kBits, int kRows>
  void fused_tile(const float* xf, int r0, int c0, int vec0) const {
    constexpr int kPerWord = 32 / kBits;
    const int words_per_group = a.group_size * kBits / 32;
    int lane_row[kTileVectors][W];
    I rows[kTileVectors];
    for (int v = 0; v < kTileVectors; ++v) rows[v] = row_offsets(c0 + (vec0 + v) * W, lane_row[v]);
    F acc[kRows][kTileVectors];
    zero<kRows>(acc);
    int phase = 0;
    for (int g = 0; g < groups_per_row; ++g) {
      F scale[kTileVectors], bias[kTileVectors];
      for (int v = 0; v < kTileVectors; ++v) group_params(lane_row[v], g, scale[v], bias[v]);
      for (int j = 0; j < words_per_group; ++j) {
        const int word = g * words_per_group + j;
        I packed[kTileVectors];
        MLXRT_L1_UNROLL
        for (int v = 0; v < kTileVectors; ++v) packed[v] = V::gather(a.w + word, rows[v]);
        MLXRT_L1_UNROLL
        for (int i = 0; i < kPerWord; ++i) {
          const int k = word * kPerWord + i;
          F wv[kTileVectors];
          MLXRT_L1_UNROLL
          for (int v = 0; v < kTileVectors; ++v) wv[v] = dequantize<kBits>(packed[v], i, scale[v], bias[v]);
          if (product_first_at(phase))
            tile_step<kRows, true>(acc, wv, xf + k, a.k);
          else
            tile_step<kRows, false>(acc, wv, xf + k, a.k);
          phase = next_phase(phase);
        }
      }
    }
    store_tile<kRows>(acc, r0, c0, vec0);
  }

  template <int kBits>
  void fused_tiles(const float* xf, int nrows, int r0, int c0) const {
    for (int vec0 = 0; vec0 < kVectorsPerUnit && c0 + vec0 * W < a.n; vec0 += kTileVectors) {
      switch (nrows) {
        case 4: fused_tile<kBits, 4>(xf, r0, c0, vec0); break;
        case 3: fused_tile<kBits, 3>(xf, r0, c0, vec0); break;
        case 2: fused_tile<kBits, 2>(xf, r0, c0, vec0); break;
        default: fused_tile<kBits, 1>(xf, r0, c0, vec0); break;
      }
    }
  }

  void unit(int u, float* scratch) const {
    const int column_units = (a.n + kColumnsPerUnit - 1) / kColumnsPerUnit;
    const int r0 = (u / column_units) * kRowsPerUnit;
    const int c0 = (u % column_units) * kColumnsPerUnit;
    const int nrows = a.rows - r0 < kRowsPerUnit ? a.rows - r0 : kRowsPerUnit;
    float* wdq = scratch;
    float* xf = scratch + static_cast<long long>(a.k) * kColumnsPerUnit;
    const long long xbase = static_cast<long long>(r0) * a.k;
    for (long long i = 0; i < static_cast<long long>(nrows) * a.k; ++i) xf[i] = element(a.x, xbase + i);
    if (nrows <= kTileRows) {
      switch (a.bits) {
        case 2: fused_tiles<2>(xf, nrows, r0, c0); return;
        case 4: fused_tiles<4>(xf, nrows, r0, c0); return;
        default: fused_tiles<8>(xf, nrows, r0, c0); return;
      }
    }
    switch (a.bits) {
      case 2: dequantize_columns<2>(c0, wdq); break;
      case 4: dequantize_columns<4>(c0, wdq); break;
      default: dequantize_columns<8>(c0, wdq); break;
    }
    for (int vec0 = 0; vec0 < kVectorsPerUnit; vec0 += kTileVectors) {
      if (c0 + vec0 * W >= a.n) break;
      int r = 0;
      for (; r + kTileRows <= nrows; r += kTileRows) tile<kTileRows>(xf + static_cast<long long>(r) * a.k, wdq, r0 + r, c0, vec0);
      switch (nrows - r) {
        case 3: tile<3>(xf + static_cast<long long>(r) * a.k, wdq, r0 + r, c0, vec0); break;
        case 2: tile<2>(xf + static_cast<long long>(r) * a.k, wdq, r0 + r, c0, vec0); break;
        case 1: tile<1>(xf + static_cast<long long>(r) * a.k, wdq, r0 + r, c0, vec0); break;
        default: break;
      }
    }
  }
};

template <class V, QmmElem E>
void run_units_of(const AffineQmmArgs& a, int begin, int end, float* scratch) {
  const AffineQmm<V, E> kernel(a);
  for (int u = begin; u < end; ++u) kernel.unit(u, scratch);
}

template <class V>
void run_units(const AffineQmmArgs& a, int begin, int end, float* scratch) {
  switch (a.elem) {
    case QmmElem::bf16: run_units_of<V, QmmElem::bf16>(a, begin, end, scratch); return;
    case QmmElem::f16: run_units_of<V, QmmElem::f16>(a, begin, end, scratch); return;
    case QmmElem::f32: run_units_of<V, QmmElem::f32>(a, begin, end, scratch); return;
  }
}

}  // namespace mlxrt::kernels::cpu::detail
