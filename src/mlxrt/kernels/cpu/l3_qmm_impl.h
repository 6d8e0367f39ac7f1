#pragma once
// The body of the L3 affine quantized matmul (the arithmetic is defined in l3_qmm_args.h), written
// once over a vector type of W 32-bit lanes, one output per lane (Vec512Vnni: 16, a whole packed
// tile; Vec256Dot: 8, half a tile). Included only by the instruction-set files, inside their
// anonymous namespace. Those are compiled with -ffp-contract=off: the only fused multiply-adds are
// the ones the definition names.
//
// The integer products of a block are summed in two chains per output (even and odd words for 8
// bits; low and high nibbles for 4 bits) and several outputs and rows run at once, so the
// multiply-accumulate instructions do not wait on each other; integer sums are exact, so none of
// this changes a bit.

#include <cstdint>

#include "mlxrt/kernels/cpu/l3_qmm_args.h"

// Every loop over the block's rows, subtiles and words unrolled, so the accumulator arrays live in
// registers (GCC at -O2 otherwise keeps them on the stack: a store and a reload around every
// vpdpbusd, which a decode step's profile showed as most of its time).
#define MLXRT_UNROLL _Pragma("GCC unroll 16")

namespace mlxrt::kernels::cpu::detail {

template <class V>
struct L3Qmm {
  using F = typename V::F;
  using I = typename V::I;
  static constexpr int W = V::kWidth;
  static constexpr int kSubtilesPerTile = kL3TileRows / W;
  static constexpr int kTilesPerUnit = kL3TilesPerUnit;

  const L3QmmArgs& a;
  const int words;        // per weight row: k · bits / 32
  const int groups;       // per row
  const int blocks;       // per row
  const int blocks_per_group;
  const int words_per_block;  // bits
  const long long tile_words;
  const int group_words;        // a group's words of one row (group_size · bits / 32)
  const long long group_stride;  // a group's words and parameters in a tile (l3_qmm_args.h)
  const int tiles;
  const long long q_stride;  // int8 values per x row

  explicit L3Qmm(const L3QmmArgs& args)
      : a(args),
        words(args.k / 32 * args.bits),
        groups(args.k / args.group_size),
        blocks(args.k / kL3Block),
        blocks_per_group(args.group_size / kL3Block),
        words_per_block(args.bits),
        tile_words(l3_tile_words(args.k, args.bits, args.group_size, args.half_params)),
        group_words(args.group_size * args.bits / 32),
        group_stride(l3_group_stride(args.group_size, args.bits, args.half_params)),
        tiles((args.n + kL3TileRows - 1) / kL3TileRows),
        q_stride(static_cast<long long>(args.k) * kL3Levels) {}


  // Rows r0 .. r0 + R of x against subtiles s0 .. s0 + S, written to out.
  template <int R, int S>
  void block(int r0, int s0) const {
    // Each subtile's tile and its first lane; group g of a tile starts g · group_stride words on.
    const std::uint32_t* tile[S];
    int lane[S];
    MLXRT_UNROLL
    for (int s = 0; s < S; ++s) {
      tile[s] = a.packed + static_cast<long long>((s0 + s) / kSubtilesPerTile) * tile_words;
      lane[s] = ((s0 + s) % kSubtilesPerTile) * W;
    }
    const std::int8_t* xq[R];
    const float* xd[R];
    const float* xs[R];
    MLXRT_UNROLL
    for (int r = 0; r < R; ++r) {
      xq[r] = a.x.q + static_cast<long long>(r0 + r) * q_stride;
      xd[r] = a.x.block_d + static_cast<long long>(r0 + r) * blocks * kL3Levels;
      xs[r] = a.x.group_xs + static_cast<long long>(r0 + r) * groups;
    }
    F acc[R][S], bacc[R][S];
    MLXRT_UNROLL
    for (int r = 0; r < R; ++r)
      MLXRT_UNROLL
      for (int s = 0; s < S; ++s) acc[r][s] = bacc[r][s] = V::zero();
    const I nibbles = V::set1i(0x0F0F0F0F);
    int b = 0;
    for (int g = 0; g < groups; ++g) {
      // The group's words of this subtile's rows (word jj at jj · 16), then its parameters.
      const std::uint32_t* base[S];
      const std::uint32_t* group_params[S];
      F scale[S];
      MLXRT_UNROLL
      for (int s = 0; s < S; ++s) {
        base[s] = tile[s] + g * group_stride + lane[s];
        group_params[s] = tile[s] + g * group_stride + static_cast<long long>(group_words) * kL3TileRows;
        scale[s] = params(group_params[s], lane[s], 0);
      }
      for (int bb = 0; bb < blocks_per_group; ++bb, ++b) {
        // Per level: two chains (low and high nibbles, or even and odd words).
        I first[R][S][2], second[R][S][2];
        MLXRT_UNROLL
        for (int r = 0; r < R; ++r)
          MLXRT_UNROLL
          for (int s = 0; s < S; ++s) first[r][s][0] = first[r][s][1] = second[r][s][0] = second[r][s][1] = V::zeroi();
        const int j0 = b * words_per_block;     // of x's row
        const int jw = bb * words_per_block - j0;  // j + jw: the word's place in the group
        if (a.bits == 4) {
          MLXRT_UNROLL
          for (int j = j0; j < j0 + 4; ++j) {
            MLXRT_UNROLL
            for (int s = 0; s < S; ++s) {
              prefetch(base[s], j + jw);
              const I wv = V::loadi(base[s] + (j + jw) * kL3TileRows);
              const I lo = V::and_(wv, nibbles);
              const I hi = V::and_(V::srli4(wv), nibbles);
              MLXRT_UNROLL
              for (int r = 0; r < R; ++r) {
                const std::int8_t* x = xq[r] + 16 * j;
                first[r][s][0] = V::dot_nibbles(first[r][s][0], lo, x);
                first[r][s][1] = V::dot_nibbles(first[r][s][1], hi, x + 4);
                second[r][s][0] = V::dot_nibbles(second[r][s][0], lo, x + 8);
                second[r][s][1] = V::dot_nibbles(second[r][s][1], hi, x + 12);
              }
            }
          }
        } else {
          MLXRT_UNROLL
          for (int j = j0; j < j0 + 8; j += 2) {
            MLXRT_UNROLL
            for (int s = 0; s < S; ++s) {
              prefetch(base[s], j + jw);
              prefetch(base[s], j + jw + 1);
              const I w0 = V::loadi(base[s] + (j + jw) * kL3TileRows);
              const I w1 = V::loadi(base[s] + (j + jw + 1) * kL3TileRows);
              MLXRT_UNROLL
              for (int r = 0; r < R; ++r) {
                const std::int8_t* x = xq[r] + 8 * j;
                first[r][s][0] = V::dot_bytes(first[r][s][0], w0, x);
                second[r][s][0] = V::dot_bytes(second[r][s][0], w0, x + 4);
                first[r][s][1] = V::dot_bytes(first[r][s][1], w1, x + 8);
                second[r][s][1] = V::dot_bytes(second[r][s][1], w1, x + 12);
              }
            }
          }
        }
        MLXRT_UNROLL
        for (int r = 0; r < R; ++r) {
          const F d1 = V::set1(xd[r][2 * b]);
          const F d2 = V::set1(xd[r][2 * b + 1]);
          MLXRT_UNROLL
          for (int s = 0; s < S; ++s) {
            const F i1 = V::to_float(V::addi(first[r][s][0], first[r][s][1]));
            const F i2 = V::to_float(V::addi(second[r][s][0], second[r][s][1]));
            acc[r][s] = V::fma(i1, V::mul(scale[s], d1), acc[r][s]);
            acc[r][s] = V::fma(i2, V::mul(scale[s], d2), acc[r][s]);
          }
        }
      }
      MLXRT_UNROLL
      for (int s = 0; s < S; ++s) {
        const F bias = params(group_params[s], lane[s], 1);
        MLXRT_UNROLL
        for (int r = 0; r < R; ++r) bacc[r][s] = V::fma(bias, V::set1(xs[r][g]), bacc[r][s]);
      }
    }
    MLXRT_UNROLL
    for (int r = 0; r < R; ++r)
      MLXRT_UNROLL
      for (int s = 0; s < S; ++s) store(r0 + r, s0 + s, V::add(acc[r][s], bacc[r][s]));
  }

  // A tile is one stream of 64-byte lines (a word of its 16 rows each, or a group's parameters),
  // read once per decode step; the line kPrefetchLines on from word j of a group is asked for
  // now (the hardware's stream detection alone left the loads waiting on memory: half the
  // matmul's samples). Past the tile's end it is the next tile's, read next. Never faults.
  static constexpr int kPrefetchLines = 32;
  static void prefetch(const std::uint32_t* group_base, int j) {
    __builtin_prefetch(group_base + static_cast<long long>(j + kPrefetchLines) * kL3TileRows, 0, 3);
  }

  // A group's scales (which 0) or biases (1) of the W outputs from `lane`, its parameters at p.
  F params(const std::uint32_t* p, int lane, int which) const {
    if (a.half_params) return V::load_half(reinterpret_cast<const std::uint16_t*>(p) + which * kL3TileRows + lane);
    return V::load(reinterpret_cast<const float*>(p) + which * kL3TileRows + lane);
  }

  void store(int row, int s, F v) const {
    const int n0 = (s / kSubtilesPerTile) * kL3TileRows + (s % kSubtilesPerTile) * W;
    const int count = a.n - n0 < W ? a.n - n0 : W;
    if (count <= 0) return;
    const long long at = static_cast<long long>(row) * a.n + n0;
    if (a.elem == QmmElem::f32) {
      V::store_f32(static_cast<float*>(a.out) + at, v, count);
    } else if (a.elem == QmmElem::bf16) {
      V::store_bf16(static_cast<std::uint16_t*>(a.out) + at, v, count);
    } else {
      V::store_f16(static_cast<std::uint16_t*>(a.out) + at, v, count);
    }
  }

  // Rows [r0, r1) against subtiles [s0, s1): four rows at a time, then one; two tiles at a time
  // for a lone row (more independent chains), one tile for four.
  void rows_block(int r0, int r1, int s0, int s1) const {
    int r = r0;
    for (; r + 4 <= r1; r += 4) {
      int s = s0;
      for (; s + kSubtilesPerTile <= s1; s += kSubtilesPerTile) block<4, kSubtilesPerTile>(r, s);
      for (; s < s1; ++s) block<4, 1>(r, s);
    }
    for (; r < r1; ++r) {
      int s = s0;
      for (; s + 2 * kSubtilesPerTile <= s1; s += 2 * kSubtilesPerTile) block<1, 2 * kSubtilesPerTile>(r, s);
      for (; s < s1; ++s) block<1, 1>(r, s);
    }
  }

  void units(int begin, int end) const {
    const int column_units = (tiles + kTilesPerUnit - 1) / kTilesPerUnit;
    for (int u = begin; u < end; ++u) {
      const int rb = u / column_units, cb = u % column_units;
      const int r0 = rb * kRowsPerUnit, r1 = r0 + kRowsPerUnit < a.rows ? r0 + kRowsPerUnit : a.rows;
      const int t0 = cb * kTilesPerUnit, t1 = t0 + kTilesPerUnit < tiles ? t0 + kTilesPerUnit : tiles;
      rows_block(r0, r1, t0 * kSubtilesPerTile, t1 * kSubtilesPerTile);
    }
  }
};

// float -> bfloat16, round to nearest even, NaN -> 0x7FC0 (as MLX's conversion).
inline std::uint16_t l3_bf16_bits(float f) {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace mlxrt::kernels::cpu::detail
