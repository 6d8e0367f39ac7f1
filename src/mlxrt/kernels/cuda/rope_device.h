#pragma once
// The device code of a head's q/k RMSNorm and RoPE, one warp a head, as the source text NVRTC
// compiles: qk_rope.cpp's kernel and decoder_layer.cpp's second phase share it. MLX's arithmetic
// (qk_rope.h says whose and why).

namespace mlxrt::kernels::cuda::detail {

constexpr const char* kNormRopeDevice = R"(
// A head's D values from src into row (the warp's D floats of shared memory): RMSNorm'd where NORM
// (the warp's float32 sum of squares, rsqrt(sum / D + eps), each value times that rounded to QT,
// times the weight nw rounded again, as mx.fast.rms_norm), else as they are.
template <typename QT, int D, bool NORM>
__device__ __forceinline__ void mlxrt_norm_head(const QT* src, const QT* nw, float eps, float* row, int lane) {
  constexpr int kPer = (D + 31) / 32;
  float v[kPer];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = lane * kPer + j;
    v[j] = i < D ? static_cast<float>(src[i]) : 0.0f;
    ss += v[j] * v[j];
  }
  if (NORM) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float rs = rsqrtf(ss / D + eps);
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = lane * kPer + j;
      if (i < D) {
        const QT y = static_cast<QT>(v[j] * rs);
        row[i] = static_cast<float>(static_cast<QT>(static_cast<float>(nw[i]) * static_cast<float>(y)));
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = lane * kPer + j;
      if (i < D) row[i] = v[j];
    }
  }
  __syncwarp();
}

// The row rotated at `position` into dst: pairs (j, j + ROT / 2), or (2j, 2j + 1) where TRAD, for
// j < ROT / 2, at the frequency 1 / freqs[j] (FREQS: MLX's CUDA RoPE takes the reciprocal in double,
// rounded) or exp2(-j / (ROT / 2) * log2(base)); the values past ROT copied.
template <typename QT, int D, int ROT, bool TRAD, bool FREQS, typename FT>
__device__ __forceinline__ void mlxrt_rope_row(const float* row, float position, const FT* freqs, float log2_base,
                                               QT* dst, int lane) {
  constexpr int kHalf = ROT / 2;
  for (int j = lane; j < kHalf; j += 32) {
    const float inv_freq = FREQS ? static_cast<float>(1.0 / freqs[j])
                                 : exp2f(-(static_cast<float>(j) / static_cast<float>(kHalf)) * log2_base);
    const float theta = position * inv_freq;
    const float c = cosf(theta), s = sinf(theta);
    const int i1 = TRAD ? 2 * j : j, i2 = TRAD ? 2 * j + 1 : j + kHalf;
    const float x1 = row[i1], x2 = row[i2];
    dst[i1] = static_cast<QT>(x1 * c - x2 * s);
    dst[i2] = static_cast<QT>(x1 * s + x2 * c);
  }
  for (int i = ROT + lane; i < D; i += 32) dst[i] = static_cast<QT>(row[i]);
}
)";

}  // namespace mlxrt::kernels::cuda::detail
