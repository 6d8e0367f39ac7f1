#pragma once
/** The plain-data call of MLX's CPU exp on many floats (avx2_exp.h's, eight at a time): for kernels
 * whose other steps are plain C++ (sampling_masks.cpp). */

namespace mlxrt::kernels::cpu {

/** out[i] = MLX's exp(x[i]) (backend/cpu/simd/math.h, its one-lane Linux build), i < n. AVX2 with
 * FMA. */
void exp_as_mlx_avx2(const float* x, long long n, float* out);

}  // namespace mlxrt::kernels::cpu
