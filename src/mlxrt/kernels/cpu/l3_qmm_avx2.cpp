// The L3 affine quantized matmul (l3_qmm_impl.h) on AVX2 with FMA: half a packed tile (8 outputs)
// per vector; the integer products by vpmaddubsw and vpmaddwd, which give the same exact sums as
// VNNI's vpdpbusd (an 8-bit weight is split into nibbles first, so no 16-bit sum saturates).
// Compiled with -mavx2 -mfma -mf16c -ffp-contract=off (CMakeLists.txt); called only when the CPU
// has them.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "mlxrt/kernels/cpu/l3_qmm_args.h"
#include "mlxrt/kernels/cpu/l3_qmm_impl.h"
#include "mlxrt/kernels/cpu/l3_quantize_impl.h"

namespace mlxrt::kernels::cpu {

namespace {

struct Vec256Dot {
  static constexpr int kWidth = 8;
  using F = __m256;
  using I = __m256i;
  static F zero() { return _mm256_setzero_ps(); }
  static I zeroi() { return _mm256_setzero_si256(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static I set1i(int x) { return _mm256_set1_epi32(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F load_half(const std::uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static I loadi(const std::uint32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I srli4(I v) { return _mm256_srli_epi32(v, 4); }
  static I addi(I a, I b) { return _mm256_add_epi32(a, b); }
  static I broadcast4(const std::int8_t* x4) {
    int v;
    std::memcpy(&v, x4, 4);
    return _mm256_set1_epi32(v);
  }
  // Products of bytes below 16 with signed bytes (|x| <= 127): pairs sum to at most 3810, far from
  // vpmaddubsw's saturation.
  static I dot_small(I w, I x) { return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)); }
  static I dot_nibbles(I acc, I w, const std::int8_t* x4) { return _mm256_add_epi32(acc, dot_small(w, broadcast4(x4))); }
  static I dot_bytes(I acc, I w, const std::int8_t* x4) {
    const I x = broadcast4(x4);
    const I mask = _mm256_set1_epi8(0x0F);
    const I lo = dot_small(_mm256_and_si256(w, mask), x);
    const I hi = dot_small(_mm256_and_si256(_mm256_srli_epi16(w, 4), mask), x);
    return _mm256_add_epi32(acc, _mm256_add_epi32(lo, _mm256_slli_epi32(hi, 4)));
  }
  static F to_float(I v) { return _mm256_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F abs(F v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static float hmax(F v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static bool any_nan(F v) { return _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0; }
  static int hsumi(I v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
  }
  // An integral r clamped to [-127, 127] as int32; 0 where r is NaN.
  static I clamp127_to_int(F r) {
    const F ordered = _mm256_cmp_ps(r, r, _CMP_ORD_Q);
    const F c = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    return _mm256_and_si256(_mm256_cvtps_epi32(c), _mm256_castps_si256(ordered));
  }
  static void store_i8(std::int8_t* p, I v) {
    const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packs_epi16(words, words));
  }
  static void store_f32(float* p, F v, int count) {
    if (count == kWidth) {
      _mm256_storeu_ps(p, v);
      return;
    }
    alignas(32) float t[kWidth];
    _mm256_store_ps(t, v);
    std::memcpy(p, t, sizeof(float) * static_cast<size_t>(count));
  }
  static void store_bf16(std::uint16_t* p, F v, int count) {
    alignas(32) float t[kWidth];
    _mm256_store_ps(t, v);
    for (int i = 0; i < count; ++i) p[i] = detail::l3_bf16_bits(t[i]);
  }
  static void store_f16(std::uint16_t* p, F v, int count) {
    alignas(16) std::uint16_t t[kWidth];
    _mm_store_si128(reinterpret_cast<__m128i*>(t), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    std::memcpy(p, t, sizeof(std::uint16_t) * static_cast<size_t>(count));
  }
};

}  // namespace

void l3_qmm_units_avx2(const L3QmmArgs& a, int begin, int end) {
  detail::L3Qmm<Vec256Dot>(a).units(begin, end);
}

void l3_quantize_block_avx2(const float* x, std::int8_t* q1, std::int8_t* q2, float* d, int* sums) {
  detail::L3QuantizeBlock<Vec256Dot>::run(x, q1, q2, d, sums);
}

}  // namespace mlxrt::kernels::cpu
