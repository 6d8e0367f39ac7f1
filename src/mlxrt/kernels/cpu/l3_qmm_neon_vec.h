#pragma once
// The vector type of the L3 quantized matmul (l3_qmm_impl.h) and its x quantization
// (l3_quantize_impl.h) on NEON: 4 lanes, a quarter of a packed tile. Included only by
// l3_qmm_neon.cpp (kDot false: plain ARMv8-A) and l3_qmm_neondot.cpp (kDot true: the ARMv8.2
// dot product SDOT, compiled with +dotprod and called only where the CPU reports it); it is
// defined in an anonymous namespace, so each file has its own copy compiled for its own
// instruction set.
//
// The integer products: a weight byte below 16 (a nibble) times a signed x byte, four per 32-bit
// lane summed, exactly. SDOT does that in one instruction (a nibble reads the same as a signed or
// an unsigned byte); plain NEON multiplies the bytes to 16 bits (vmull_s8) and adds pairs twice.
// An 8-bit weight is split into its nibbles first, as on AVX2, so both give the same exact sums.
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "mlxrt/kernels/cpu/l3_qmm_impl.h"  // l3_bf16_bits

namespace mlxrt::kernels::cpu {
namespace {

template <bool kDot>
struct Vec128L3 {
  static constexpr int kWidth = 4;
  using F = float32x4_t;
  using I = int32x4_t;
  static F zero() { return vdupq_n_f32(0.0f); }
  static I zeroi() { return vdupq_n_s32(0); }
  static F set1(float x) { return vdupq_n_f32(x); }
  static I set1i(int x) { return vdupq_n_s32(x); }
  static F load(const float* p) { return vld1q_f32(p); }
  static F load_half(const std::uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
  static I loadi(const std::uint32_t* p) { return vreinterpretq_s32_u32(vld1q_u32(p)); }
  static I and_(I a, I b) { return vandq_s32(a, b); }
  static I srli4(I v) { return vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(v), 4)); }
  static I addi(I a, I b) { return vaddq_s32(a, b); }
  static int8x16_t broadcast4(const std::int8_t* x4) {
    std::int32_t v;
    std::memcpy(&v, x4, 4);
    return vreinterpretq_s8_s32(vdupq_n_s32(v));
  }
  // Per lane: the sum of its four bytes of w (each below 16) times the four bytes of x.
  static I dot_small(I acc, I w, int8x16_t x) {
    if constexpr (kDot) {
      return vdotq_s32(acc, vreinterpretq_s8_s32(w), x);
    } else {
      const int8x16_t wb = vreinterpretq_s8_s32(w);
      const int32x4_t lo = vpaddlq_s16(vmull_s8(vget_low_s8(wb), vget_low_s8(x)));  // byte pairs of lanes 0, 1
      const int32x4_t hi = vpaddlq_s16(vmull_high_s8(wb, x));                      // of lanes 2, 3
      return vaddq_s32(acc, vpaddq_s32(lo, hi));
    }
  }
  static I dot_nibbles(I acc, I w, const std::int8_t* x4) { return dot_small(acc, w, broadcast4(x4)); }
  static I dot_bytes(I acc, I w, const std::int8_t* x4) {
    const int8x16_t x = broadcast4(x4);
    const uint8x16_t wb = vreinterpretq_u8_s32(w);
    const I lo = vreinterpretq_s32_u8(vandq_u8(wb, vdupq_n_u8(0x0F)));
    const I hi = vreinterpretq_s32_u8(vshrq_n_u8(wb, 4));
    return vaddq_s32(dot_small(acc, lo, x), vshlq_n_s32(dot_small(zeroi(), hi, x), 4));
  }
  static F to_float(I v) { return vcvtq_f32_s32(v); }
  static F mul(F a, F b) { return vmulq_f32(a, b); }
  static F add(F a, F b) { return vaddq_f32(a, b); }
  static F fma(F a, F b, F c) { return vfmaq_f32(c, a, b); }  // a * b + c, rounded once
  static F sub(F a, F b) { return vsubq_f32(a, b); }
  static F abs(F v) { return vabsq_f32(v); }
  static F max(F a, F b) { return vmaxq_f32(a, b); }
  static float hmax(F v) { return vmaxvq_f32(v); }
  static bool any_nan(F v) { return vminvq_u32(vceqq_f32(v, v)) == 0; }
  static int hsumi(I v) { return vaddvq_s32(v); }
  // An integral r clamped to [-127, 127] as int32; 0 where r is NaN.
  static I clamp127_to_int(F r) {
    const uint32x4_t ordered = vceqq_f32(r, r);
    const F c = vminq_f32(vmaxq_f32(r, vdupq_n_f32(-127.0f)), vdupq_n_f32(127.0f));
    return vandq_s32(vcvtnq_s32_f32(c), vreinterpretq_s32_u32(ordered));
  }
  static void store_i8(std::int8_t* p, I v) {
    const int16x4_t h = vqmovn_s32(v);
    const int8x8_t b = vqmovn_s16(vcombine_s16(h, h));
    std::memcpy(p, &b, 4);
  }
  static void store_f32(float* p, F v, int count) {
    if (count == kWidth) {
      vst1q_f32(p, v);
      return;
    }
    float t[kWidth];
    vst1q_f32(t, v);
    std::memcpy(p, t, sizeof(float) * static_cast<size_t>(count));
  }
  static void store_bf16(std::uint16_t* p, F v, int count) {
    float t[kWidth];
    vst1q_f32(t, v);
    for (int i = 0; i < count; ++i) p[i] = mlxrt::kernels::cpu::detail::l3_bf16_bits(t[i]);
  }
  static void store_f16(std::uint16_t* p, F v, int count) {
    std::uint16_t t[kWidth];
    vst1_u16(t, vreinterpret_u16_f16(vcvt_f16_f32(v)));
    std::memcpy(p, t, sizeof(std::uint16_t) * static_cast<size_t>(count));
  }
};

}  // namespace
}  // namespace mlxrt::kernels::cpu
