// The affine quantized matmul (affine_qmm_impl.h) and the bfloat16 matmul (bf16_matmul_impl.h) on
// 4-lane NEON vectors, for 64-bit Arm Linux. NEON is part of ARMv8-A, so this needs no run-time
// check. Compiled with -ffp-contract=off (cmake/cpu_kernels.cmake): the kernels fuse a multiply
// and an add only where MLX's aarch64 library does (V::kFused*), with the explicit instruction.
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "mlxrt/kernels/cpu/affine_qmm_args.h"
#include "mlxrt/kernels/cpu/affine_qmm_impl.h"
#include "mlxrt/kernels/cpu/bf16_matmul_impl.h"

namespace mlxrt::kernels::cpu {

namespace {

struct Vec128 {
  static constexpr int kWidth = 4;
  // MLX's aarch64 library is built with the compiler's default contraction: its float
  // `a * b + c` are fused multiply-adds (affine_qmm_impl.h, bf16_matmul_impl.h).
  static constexpr bool kFusesMultiplyAdd = true;
  using F = float32x4_t;
  using I = int32x4_t;
  static F zero() { return vdupq_n_f32(0.0f); }
  static F load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, F v) { vst1q_f32(p, v); }
  static F set1(float x) { return vdupq_n_f32(x); }
  // `a` is the instruction's first operand, whose NaN the result keeps when both are NaN (asm, so
  // the compiler cannot swap the operands of what it takes for a commutative operation).
  static F add(F a, F b) {
    F r;
    asm("fadd %0.4s, %1.4s, %2.4s" : "=w"(r) : "w"(a), "w"(b));
    return r;
  }
  static F mul(F a, F b) {
    F r;
    asm("fmul %0.4s, %1.4s, %2.4s" : "=w"(r) : "w"(a), "w"(b));
    return r;
  }
  // acc + a * b rounded once (FMLA; a NaN in acc wins over the product's, then a's over b's).
  static F fma(F acc, F a, F b) {
    asm("fmla %0.4s, %1.4s, %2.4s" : "+w"(acc) : "w"(a), "w"(b));
    return acc;
  }
  static I set1i(int x) { return vdupq_n_s32(x); }
  static I loadi(const int* p) { return vld1q_s32(p); }
  // NEON has no gather: four scalar loads.
  static I gather(const std::uint32_t* base, I index) {
    int idx[4];
    vst1q_s32(idx, index);
    const std::uint32_t v[4] = {base[idx[0]], base[idx[1]], base[idx[2]], base[idx[3]]};
    return vreinterpretq_s32_u32(vld1q_u32(v));
  }
  static I gather_bytes(const char* base, I byte_offsets) {
    int off[4];
    vst1q_s32(off, byte_offsets);
    std::uint32_t v[4];
    for (int l = 0; l < 4; ++l) std::memcpy(&v[l], base + off[l], 4);
    return vreinterpretq_s32_u32(vld1q_u32(v));
  }
  static F low_bf16(I v) { return vreinterpretq_f32_s32(vshlq_n_s32(v, 16)); }
  static F high_bf16(I v) {
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_s32(v), vdupq_n_u32(0xFFFF0000u)));
  }
  static I srl(I v, int n) { return vreinterpretq_s32_u32(vshlq_u32(vreinterpretq_u32_s32(v), vdupq_n_s32(-n))); }
  static I and_(I a, I b) { return vandq_s32(a, b); }
  static F to_float(I v) { return vcvtq_f32_s32(v); }
  // _MLX_BFloat16(float) lane by lane: round to nearest even on the bits, NaN to 0x7FC0.
  static F round_bf16(F v) {
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    uint32x4_t r = vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7FFF)));
    r = vandq_u32(r, vdupq_n_u32(0xFFFF0000u));
    const uint32x4_t ordered = vceqq_f32(v, v);
    return vreinterpretq_f32_u32(vbslq_u32(ordered, r, vdupq_n_u32(0x7FC00000u)));
  }
  // _MLX_Float16(float) lane by lane for a non-NaN: IEEE round to nearest even (FCVTN under the
  // default FPCR); a NaN stays as it is (store_element gives it MLX's encoding).
  static F round_f16(F v) {
    const F r = vcvt_f32_f16(vcvt_f16_f32(v));
    return vbslq_f32(vceqq_f32(v, v), r, v);
  }
  static float half_to_float(std::uint16_t h) {
    __fp16 f;
    std::memcpy(&f, &h, 2);
    return static_cast<float>(f);
  }
  static std::uint16_t float_to_half(float f) {
    const __fp16 h = static_cast<__fp16>(f);
    std::uint16_t u;
    std::memcpy(&u, &h, 2);
    return u;
  }
};

}  // namespace

void bf16_matmul_units_neon(const Bf16MatmulArgs& a, int begin, int end, float* scratch) {
  detail::run_bf16_units<Vec128>(a, begin, end, scratch);
}

void affine_qmm_units_neon(const AffineQmmArgs& a, int begin, int end, float* scratch) {
  detail::run_units<Vec128>(a, begin, end, scratch);
}

}  // namespace mlxrt::kernels::cpu
