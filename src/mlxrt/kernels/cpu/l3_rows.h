#pragma once
/** The steps of the L3 kernels (l3_matmul.h, l3_fused.h) on plain buffers, for the fused L3 blocks
 * (l3_block.h) that chain several of them inside one MLX node: each computes exactly what its
 * one-node form computes, so a block gives the bytes of the nodes it replaces. */
#include <cstdint>
#include <optional>
#include <vector>

#include <mlx/array.h>
#include <mlx/dtype.h>

#include "mlxrt/kernels/cpu/l3_qmm_args.h"

namespace mlxrt::kernels::cpu {

namespace mx = mlx::core;

class CpuKernels;

namespace detail {

/** x's rows quantized as l3_qmm_args.h defines (the first step of the L3 matmul). */
struct QuantizedRows {
  std::vector<std::int8_t> q;
  std::vector<float> block_d;
  std::vector<float> group_xs;

  // Row r onwards, for rows of k values and groups of g.
  L3Rows row(long long r, int k, int g) const {
    return {q.data() + r * k * kL3Levels, block_d.data() + r * (k / kL3Block) * kL3Levels, group_xs.data() + r * (k / g)};
  }
};

/** The rows of a row-contiguous x (`rows` × k of type t), quantized over the threads. */
QuantizedRows quantize_rows(const CpuKernels& kernels, const char* x, mx::Dtype t, int rows, int k, int bits, int g);

/** Several L3 products (any shapes), all their work units in one run of the threads. */
void run_l3_products(const CpuKernels& kernels, const std::vector<L3QmmArgs>& products);

/** Points `args` at the tiles of an array l3_pack made, with its parameters' format. */
void set_packed(L3QmmArgs& args, const std::uint32_t* packed);

/** The QmmElem of a float32, bfloat16 or float16 buffer. */
QmmElem elem_of(mx::Dtype t);

/** L3's RMSNorm of `rows` contiguous rows of d values of type t (weight: d floats, or null for
 * none) into `out` (same layout), as the fused rms_norm node computes it. */
void rms_norm_rows(const char* x, mx::Dtype t, long long rows, int d, const float* weight, float eps, char* out);

/** Element-wise a + b of n values of type t, rounded to t (mx::add of two arrays of one type). */
void add_rows(const char* a, const char* b, mx::Dtype t, long long n, char* out);

/** L3's attention (l3_fused.h) of q [B, Hq, Lq, D] over keys and values [B, Hkv, Lk, D or Dv]
 * (each with a contiguous last dimension) into `out`, B × Hq × Lq × Dv of q's type. */
void attend_into(const CpuKernels& kernels, const mx::array& q, const mx::array& keys, const mx::array& values,
                 float scale, bool causal, void* out);

/** A RoPE call's parameters (fast::rope's, without the offset): base is unused with freqs. */
struct L3RopeSpec {
  int dims = 0;
  bool traditional = false;
  float base = 0;
  float scale = 1;
};

/** The cosines and sines of `length` positions from `offset` on. */
struct RopeTable {
  L3RopeSpec spec;
  int half = 0;
  std::vector<float> cosines, sines;  // length × half
};

/** `freqs`: dims / 2 values, or empty for base^(-i / half). Angles in double precision. */
RopeTable rope_table(const L3RopeSpec& spec, const std::vector<float>& freqs, int offset, int length);

/** One contiguous row of d values of type t at `position` (of the table's) rotated into dst. */
void rope_row(const RopeTable& table, const char* row, mx::Dtype t, int d, long long position, char* dst);

}  // namespace detail
}  // namespace mlxrt::kernels::cpu
