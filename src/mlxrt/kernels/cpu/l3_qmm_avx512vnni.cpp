// The L3 affine quantized matmul (l3_qmm_impl.h) on AVX-512 with VNNI: one packed tile (16
// outputs) per vector, vpdpbusd for the integer products. Compiled with -mavx512f -mavx512bw
// -mavx512vl -mavx512vnni -mfma -mf16c -ffp-contract=off (CMakeLists.txt); called only when the
// CPU has them.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "mlxrt/kernels/cpu/l3_qmm_args.h"
#include "mlxrt/kernels/cpu/l3_qmm_impl.h"
#include "mlxrt/kernels/cpu/l3_quantize_impl.h"

namespace mlxrt::kernels::cpu {

namespace {

struct Vec512Vnni {
  static constexpr int kWidth = 16;
  using F = __m512;
  using I = __m512i;
  static F zero() { return _mm512_setzero_ps(); }
  static I zeroi() { return _mm512_setzero_si512(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static I set1i(int x) { return _mm512_set1_epi32(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F load_half(const std::uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static I loadi(const std::uint32_t* p) { return _mm512_loadu_si512(p); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I srli4(I v) { return _mm512_srli_epi32(v, 4); }
  static I addi(I a, I b) { return _mm512_add_epi32(a, b); }
  static I broadcast4(const std::int8_t* x4) {
    int v;
    std::memcpy(&v, x4, 4);
    return _mm512_set1_epi32(v);
  }
  // acc + the sums of four products of unsigned bytes of `w` and the four signed bytes at x4.
  static I dot_nibbles(I acc, I w, const std::int8_t* x4) { return _mm512_dpbusd_epi32(acc, w, broadcast4(x4)); }
  static I dot_bytes(I acc, I w, const std::int8_t* x4) { return _mm512_dpbusd_epi32(acc, w, broadcast4(x4)); }
  static F to_float(I v) { return _mm512_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F abs(F v) { return _mm512_abs_ps(v); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static float hmax(F v) { return _mm512_reduce_max_ps(v); }
  static bool any_nan(F v) { return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0; }
  static int hsumi(I v) { return _mm512_reduce_add_epi32(v); }
  // An integral r clamped to [-127, 127] as int32; 0 where r is NaN.
  static I clamp127_to_int(F r) {
    const __mmask16 ordered = _mm512_cmp_ps_mask(r, r, _CMP_ORD_Q);
    const F c = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    return _mm512_maskz_cvtps_epi32(ordered, c);
  }
  static void store_i8(std::int8_t* p, I v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v)); }
  static __mmask16 first(int count) { return static_cast<__mmask16>((1u << count) - 1u); }
  static void store_f32(float* p, F v, int count) {
    if (count == kWidth)
      _mm512_storeu_ps(p, v);
    else
      _mm512_mask_storeu_ps(p, first(count), v);
  }
  static void store_bf16(std::uint16_t* p, F v, int count) {
    const I u = _mm512_castps_si512(v);
    const I lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    I r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
    _mm512_mask_cvtepi32_storeu_epi16(p, first(count), r);
  }
  static void store_f16(std::uint16_t* p, F v, int count) {
    const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(p, first(count), h);
  }
};

}  // namespace

void l3_qmm_units_avx512vnni(const L3QmmArgs& a, int begin, int end) {
  detail::L3Qmm<Vec512Vnni>(a).units(begin, end);
}

void l3_quantize_block_avx512vnni(const float* x, std::int8_t* q1, std::int8_t* q2, float* d, int* sums) {
  detail::L3QuantizeBlock<Vec512Vnni>::run(x, q1, q2, d, sums);
}

}  // namespace mlxrt::kernels::cpu
