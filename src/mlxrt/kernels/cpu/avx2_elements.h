#pragma once
// Float32, bfloat16 and float16 elements read as float on AVX2 with F16C: what the AVX2 kernel files
// (l3_fused_avx2.cpp, logsumexp_avx2.cpp, argmax_avx2.cpp) share. Included only by those files,
// inside their anonymous namespace (each file's own copy, compiled with its flags), after their
// includes of <immintrin.h>, <cstdint>, <cstring> and affine_qmm_args.h (no include here: it would
// land inside that namespace).

// Eight elements from element `at` of p as float.
template <QmmElem E>
__m256 load8(const void* p, long long at) {
  if constexpr (E == QmmElem::f32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + at);
  } else if constexpr (E == QmmElem::bf16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(p) + at));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(p) + at)));
  }
}

// Element `at` of p as float.
template <QmmElem E>
float load1(const void* p, long long at) {
  if constexpr (E == QmmElem::f32) {
    return static_cast<const float*>(p)[at];
  } else if constexpr (E == QmmElem::bf16) {
    const std::uint32_t u = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(p)[at]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  } else {
    return _cvtsh_ss(static_cast<const std::uint16_t*>(p)[at]);
  }
}
