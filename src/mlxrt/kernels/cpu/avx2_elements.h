#pragma once
// Float32, bfloat16 and float16 elements read as float on AVX2 with F16C: what the AVX2 kernel
// files (l3_fused_avx2.cpp, logsumexp_avx2.cpp, argmax_avx2.cpp) share. Included only by those
// files, inside their anonymous namespace (each file's own copy, compiled with its flags), after
// their includes of <immintrin.h>, <cmath>, <cstdint>, <cstring> and affine_qmm_args.h (no include
// here: it would land inside that namespace).

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

// A row's largest value but for its NaNs (-inf where it has nothing else), and whether it holds a
// NaN: _mm256_max_ps returns its second operand where the first is a NaN, so NaNs stay out.
struct RowMaximum {
  float value;
  bool nan;
};

template <QmmElem E>
float load1(const void* p, long long at);

template <QmmElem E>
RowMaximum row_maximum(const void* row, long long n) {
  __m256 top = _mm256_set1_ps(-INFINITY);
  __m256 unordered = _mm256_setzero_ps();
  long long i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = load8<E>(row, i);
    unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    top = _mm256_max_ps(v, top);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, top);
  RowMaximum out{lanes[0], _mm256_movemask_ps(unordered) != 0};
  for (int l = 1; l < 8; ++l) out.value = lanes[l] > out.value ? lanes[l] : out.value;
  for (; i < n; ++i) {
    const float v = load1<E>(row, i);
    out.nan = out.nan || v != v;
    out.value = v > out.value ? v : out.value;
  }
  return out;
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
