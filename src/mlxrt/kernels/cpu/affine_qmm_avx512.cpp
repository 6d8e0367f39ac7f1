// The affine quantized matmul (affine_qmm_impl.h) and the bfloat16 matmul (bf16_matmul_impl.h) on 16-lane AVX-512 vectors. Compiled with
// -mavx512f -mavx512bw -mavx512vl -mf16c -ffp-contract=off (CMakeLists.txt); called only when
// the CPU has them.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "mlxrt/kernels/cpu/affine_qmm_args.h"
#include "mlxrt/kernels/cpu/affine_qmm_impl.h"
#include "mlxrt/kernels/cpu/bf16_matmul_impl.h"

namespace mlxrt::kernels::cpu {

namespace {

struct Vec512 {
  static constexpr int kWidth = 16;
  using F = __m512;
  using I = __m512i;
  static F zero() { return _mm512_setzero_ps(); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  // `a` is the instruction's first source, whose NaN the result keeps when both are NaN (asm, so
  // the compiler cannot swap the operands of what it takes for a commutative operation).
  static F add(F a, F b) {
    F r;
    asm("vaddps %2, %1, %0" : "=v"(r) : "v"(a), "v"(b));
    return r;
  }
  static F mul(F a, F b) {
    F r;
    asm("vmulps %2, %1, %0" : "=v"(r) : "v"(a), "v"(b));
    return r;
  }
  static I set1i(int x) { return _mm512_set1_epi32(x); }
  static I loadi(const int* p) { return _mm512_loadu_si512(p); }
  static I gather(const std::uint32_t* base, I index) { return _mm512_i32gather_epi32(index, base, 4); }
  static I gather_bytes(const char* base, I byte_offsets) { return _mm512_i32gather_epi32(byte_offsets, base, 1); }
  // The bfloat16 in the low / high half of each 32-bit lane, as float.
  static F low_bf16(I v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
  static F high_bf16(I v) { return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)))); }
  static I srl(I v, int n) { return _mm512_srl_epi32(v, _mm_cvtsi32_si128(n)); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static F to_float(I v) { return _mm512_cvtepi32_ps(v); }
  // _MLX_BFloat16(float): round to nearest even on the bits; NaN -> 0x7FC0.
  static F round_bf16(F v) {
    const I u = _mm512_castps_si512(v);
    const I lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    I r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
    r = _mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC00000));
    return _mm512_castsi512_ps(r);
  }
  // _MLX_Float16(float) is IEEE round to nearest even (subnormals and overflow included), as the
  // hardware conversion; a NaN keeps its sign, all that the following float operations and the
  // final store (sign | 0x7D00) look at.
  static F round_f16(F v) {
    const F r = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
  }
  static float half_to_float(std::uint16_t h) { return _cvtsh_ss(h); }
  static std::uint16_t float_to_half(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
};

}  // namespace

void bf16_matmul_units_avx512(const Bf16MatmulArgs& a, int begin, int end, float* scratch) {
  detail::run_bf16_units<Vec512>(a, begin, end, scratch);
}

void affine_qmm_units_avx512(const AffineQmmArgs& a, int begin, int end, float* scratch) {
  detail::run_units<Vec512>(a, begin, end, scratch);
}

}  // namespace mlxrt::kernels::cpu
