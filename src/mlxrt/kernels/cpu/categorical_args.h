#pragma once
/** The plain-data call of the L1 CPU categorical sampling (categorical.h): what its instruction-set
 * file sees (as affine_qmm_args.h, no header with inline functions). */
#include <cstdint>

#include "mlxrt/kernels/cpu/affine_qmm_args.h"

namespace mlxrt::kernels::cpu {

/** MLX's categorical draw from one row of n > 0 logits of type `elem` by the inverse of its
 * distribution function (mlx/random.cpp, categorical_inverse_cdf), given the draw's uniform number
 * u in [0, 1): with x the row as float32 and m its maximum, the weights w = exp(x - m) (MLX's exp
 * polynomial; where m is infinite, w = (x == m)), their running sum from zero taken in element order
 * in float32, and the answer one less than the number of running sums at or below u times the total.
 * `cdf` holds n floats of scratch. AVX2 with FMA and F16C. */
std::uint32_t inverse_cdf_row_avx2(const void* row, QmmElem elem, long long n, float u, float* cdf);

/** MLX's random bits for key (k0, k1): the `count` 32-bit words its RandomBits node writes for one
 * key (mlx/backend/cpu/primitives.cpp), Threefry-2x32 with 20 rounds of each counter pair: with
 * half = count / 2 and odd = count % 2, word c (c < half) and word c + half + odd are the two
 * halves of the hash of (c, c + half + odd), and for odd counts word half is the first half of the
 * hash of (half, 0). AVX2. */
void random_bits_avx2(std::uint32_t k0, std::uint32_t k1, long long count, std::uint32_t* words);

/** The indices i (ascending) whose approximate sums, with their slack, reach `lower`: the elements
 * that may hold the largest exact sum. Returns how many it wrote to `near` (room for n). AVX2 with
 * FMA. */
long long gumbel_near_row_avx2(const float* sums, long long n, float lower, std::uint32_t* near);

/** out[i] = the approximate natural logarithm the Gumbel sums take (positive normal x[i]), for the
 * test that pins its error. AVX2 with FMA. */
void log_approx_avx2(const float* x, long long n, float* out);

/** How far (at most) an approximate Gumbel sum (gumbel_sums_row_avx2) is from MLX's: kGumbelSlack +
 * kGumbelSlackPerUnit * |sum|, far wider than the approximation's certified error
 * (cpu_categorical_test.cpp: its logarithm against the exact one over every float it can meet). */
constexpr float kGumbelSlack = 2e-4f;
constexpr float kGumbelSlackPerUnit = 1.0f / (1 << 20);

/** The Gumbel draw's sums for one row, approximately: sums[i] close to MLX's float32
 * -log(-log(u_i)) + x_i, u_i = min(words[i] / 2^32, the float below 1), with logarithms of our own
 * (within kGumbelSlack..., see above, of MLX's). Returns the largest sums[i] less its slack: the
 * largest exact sum is at least that. `unusual` is set where the row holds a NaN or +inf logit or a
 * zero word (u = 0): there the approximation does not hold and the caller computes every sum exactly.
 * -inf logits give -inf sums. AVX2 with FMA and F16C. */
float gumbel_sums_row_avx2(const void* row, QmmElem elem, long long n, const std::uint32_t* words, float* sums,
                           bool& unusual);

}  // namespace mlxrt::kernels::cpu
