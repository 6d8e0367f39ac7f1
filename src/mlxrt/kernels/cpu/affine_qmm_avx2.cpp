// The affine quantized matmul (affine_qmm_impl.h) and the bfloat16 matmul (bf16_matmul_impl.h) on 8-lane AVX2 vectors. Compiled with -mavx2
// -mf16c -ffp-contract=off (CMakeLists.txt); called only when the CPU has them.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "mlxrt/kernels/cpu/affine_qmm_args.h"
#include "mlxrt/kernels/cpu/affine_qmm_impl.h"
#include "mlxrt/kernels/cpu/bf16_matmul_impl.h"

namespace mlxrt::kernels::cpu {

namespace {

struct Vec256 {
  static constexpr int kWidth = 8;
  using F = __m256;
  using I = __m256i;
  static F zero() { return _mm256_setzero_ps(); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  // As Vec512::add / mul: `a` is the first source.
  static F add(F a, F b) {
    F r;
    asm("vaddps %2, %1, %0" : "=x"(r) : "x"(a), "x"(b));
    return r;
  }
  static F mul(F a, F b) {
    F r;
    asm("vmulps %2, %1, %0" : "=x"(r) : "x"(a), "x"(b));
    return r;
  }
  static I set1i(int x) { return _mm256_set1_epi32(x); }
  static I loadi(const int* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I gather(const std::uint32_t* base, I index) {
    return _mm256_i32gather_epi32(reinterpret_cast<const int*>(base), index, 4);
  }
  static I gather_bytes(const char* base, I byte_offsets) {
    return _mm256_i32gather_epi32(reinterpret_cast<const int*>(base), byte_offsets, 1);
  }
  static F low_bf16(I v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
  static F high_bf16(I v) { return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)))); }
  static I srl(I v, int n) { return _mm256_srl_epi32(v, _mm_cvtsi32_si128(n)); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static F to_float(I v) { return _mm256_cvtepi32_ps(v); }
  // As Vec512::round_bf16 / round_f16 (affine_qmm_avx512.cpp).
  static F round_bf16(F v) {
    const I u = _mm256_castps_si256(v);
    const I lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    I r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
    r = _mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
    const F nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)), nan);
  }
  static F round_f16(F v) {
    const F r = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return _mm256_blendv_ps(r, v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  static float half_to_float(std::uint16_t h) { return _cvtsh_ss(h); }
  static std::uint16_t float_to_half(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
};

}  // namespace

void bf16_matmul_units_avx2(const Bf16MatmulArgs& a, int begin, int end, float* scratch) {
  detail::run_bf16_units<Vec256>(a, begin, end, scratch);
}

void affine_qmm_units_avx2(const AffineQmmArgs& a, int begin, int end, float* scratch) {
  detail::run_units<Vec256>(a, begin, end, scratch);
}

}  // namespace mlxrt::kernels::cpu
