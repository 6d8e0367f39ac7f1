#pragma once
// The device code of the L3 affine matrix-vector kernels (affine_qmv.cpp, fused_qmv.cpp), as the
// source text MLX compiles with NVRTC: the helpers and one warp's product of R rows of w with the
// M rows of x. Why it is written this way: affine_qmv.h.

namespace mlxrt::kernels::cuda::detail {

constexpr const char* kQmvDevice = R"(
// Value j of a packed word as f = 1 + q / 2^BITS: q moved under the exponent of 1.0f.
template <int BITS>
__device__ __forceinline__ float mlxrt_unpack(uint32_t word, int j) {
  constexpr int kPos = 23 - BITS;
  constexpr uint32_t kMask = ((1u << BITS) - 1u) << kPos;
  const int sh = kPos - BITS * j;  // a constant once the caller's loop is unrolled
  const uint32_t v = sh >= 0 ? (word << sh) : (word >> -sh);
  return __uint_as_float((v & kMask) | 0x3F800000u);
}

// The floats one 32-bit word of x holds.
__device__ __forceinline__ void mlxrt_word_to_float(uint32_t u, float* out, const __nv_bfloat16*) {
  out[0] = __uint_as_float(u << 16);
  out[1] = __uint_as_float(u & 0xFFFF0000u);
}
__device__ __forceinline__ void mlxrt_word_to_float(uint32_t u, float* out, const __half*) {
  out[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(u & 0xFFFFu)));
  out[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(u >> 16)));
}
__device__ __forceinline__ void mlxrt_word_to_float(uint32_t u, float* out, const float*) {
  out[0] = __uint_as_float(u);
}

// N consecutive values of x as floats: 8- or 16-byte loads where x is 16-byte aligned (every
// offset the kernel reads at is then a multiple of the load), element by element otherwise.
template <typename T, int N>
__device__ __forceinline__ void mlxrt_load_x(const T* p, float (&out)[N], bool vec) {
  constexpr int kWords = N * static_cast<int>(sizeof(T)) / 4;
  constexpr int kPer = 4 / static_cast<int>(sizeof(T));
  if (vec) {
    uint32_t u[kWords];
    if constexpr (kWords % 4 == 0) {
#pragma unroll
      for (int b = 0; b < kWords / 4; ++b) {
        const uint4 v = reinterpret_cast<const uint4*>(p)[b];
        u[4 * b] = v.x; u[4 * b + 1] = v.y; u[4 * b + 2] = v.z; u[4 * b + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int b = 0; b < kWords / 2; ++b) {
        const uint2 v = reinterpret_cast<const uint2*>(p)[b];
        u[2 * b] = v.x; u[2 * b + 1] = v.y;
      }
    }
#pragma unroll
    for (int i = 0; i < kWords; ++i) mlxrt_word_to_float(u[i], &out[i * kPer], p);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = static_cast<float>(p[j]);
  }
}

__device__ __forceinline__ uint32_t mlxrt_part(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ float mlxrt_warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

// One step of a warp's rows: the 16 bytes at value offset k0 of each of R rows (wv, their groups'
// scales s and biases b as floats) against the M rows of x (K values each), added to acc.
template <int M, int R, int BITS, typename XT>
__device__ __forceinline__ void mlxrt_qmv_sum_step(const XT* x, bool x_vec, int K, int k0, const uint4* wv,
                                                   const float* s, const float* b, float (&acc)[M][R]) {
  constexpr int kVpw = 32 / BITS;
  constexpr float kLift = static_cast<float>(1 << BITS);
  float dot[M][R], xs[M];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    xs[m] = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) dot[m][r] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float f[R][kVpw];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t word = mlxrt_part(wv[r], i);
#pragma unroll
      for (int j = 0; j < kVpw; ++j) f[r][j] = mlxrt_unpack<BITS>(word, j);
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float xv[kVpw];
      mlxrt_load_x(x + static_cast<size_t>(m) * K + k0 + i * kVpw, xv, x_vec);
#pragma unroll
      for (int j = 0; j < kVpw; ++j) {
        xs[m] += xv[j];
#pragma unroll
        for (int r = 0; r < R; ++r) dot[m][r] = fmaf(f[r][j], xv[j], dot[m][r]);
      }
    }
  }
  // sum x (s q + b) = s 2^BITS (sum x f - sum x) + b sum x.
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = fmaf(s[r] * kLift, dot[m][r] - xs[m], fmaf(b[r], xs[m], acc[m][r]));
}

// x as int8 for 4-bit rows (DecoderLayerGrid::q8, L3's own arithmetic): each 32 values k = 32c ..
// 32c + 31 (a lane's step) as eight words, word 2i the values 8i, 8i+2, 8i+4, 8i+6 of the chunk and
// word 2i+1 the odd ones (the order a 4-bit word's nibbles fall in when masked with 0x0F0F0F0F and
// shifted by 4), and per chunk its scale d (the chunk's largest |x| / 127) and its float32 sum of x
// in order. A step's 32 products of a row are then 8 DP4As on integers, s d sum(q xq) + b sum(x).
struct mlxrt_q8_row {
  const int* q;
  const float2* ds;
};
template <typename T>
struct mlxrt_is_q8 {
  static constexpr bool value = false;
};
template <>
struct mlxrt_is_q8<mlxrt_q8_row> {
  static constexpr bool value = true;
};

// The n values of x (n a multiple of 32) into q (n / 4 words) and ds (n / 32), by the block's
// threads, a chunk each; the block waits for all of it.
template <typename XT>
__device__ __forceinline__ void mlxrt_q8_stage(const XT* x, int n, int* q, float2* ds) {
  for (int c = threadIdx.x; c < n / 32; c += blockDim.x) {
    float v[32];
    float amax = 0.0f, sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      v[j] = static_cast<float>(x[32 * c + j]);
      amax = fmaxf(amax, fabsf(v[j]));
      sum += v[j];
    }
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      const int base = 8 * (w / 2) + (w % 2);
      uint32_t word = 0;
#pragma unroll
      for (int b = 0; b < 4; ++b)
        word |= (static_cast<uint32_t>(__float2int_rn(v[base + 2 * b] * inv)) & 0xFFu) << (8 * b);
      q[8 * c + w] = static_cast<int>(word);
    }
    ds[c] = make_float2(amax / 127.0f, sum);
  }
  __syncthreads();
}

// mlxrt_qmv_sum_step with x as int8 (one row of x; 4-bit rows).
template <int R>
__device__ __forceinline__ void mlxrt_q4_sum_step_q8(const mlxrt_q8_row& x, int k0, const uint4* wv, const float* s,
                                                     const float* b, float (&acc)[1][R]) {
  const int c = k0 >> 5;
  const uint4 xa = reinterpret_cast<const uint4*>(x.q)[2 * c];
  const uint4 xb = reinterpret_cast<const uint4*>(x.q)[2 * c + 1];
  const int xw[8] = {static_cast<int>(xa.x), static_cast<int>(xa.y), static_cast<int>(xa.z), static_cast<int>(xa.w),
                     static_cast<int>(xb.x), static_cast<int>(xb.y), static_cast<int>(xb.z), static_cast<int>(xb.w)};
  const float2 ds = x.ds[c];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    int dot = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = mlxrt_part(wv[r], i);
      dot = __dp4a(static_cast<int>(w & 0x0F0F0F0Fu), xw[2 * i], dot);
      dot = __dp4a(static_cast<int>((w >> 4) & 0x0F0F0F0Fu), xw[2 * i + 1], dot);
    }
    acc[0][r] = fmaf(s[r] * ds.x, static_cast<float>(dot), fmaf(b[r], ds.y, acc[0][r]));
  }
}

// One warp's sums for R rows of quantized matrices with the M rows of x (M x K, row-major, x_vec:
// 16-byte aligned), each lane's partial sum in acc (mlxrt_warp_sum totals it). Row r is row n[r] of
// matrix a (packed words wa, scales sa, biases ba) for r < RA, of matrix b (same shape and kind)
// after: R == RA for one matrix, RA = R / 2 for gate's and up's rows in one pass. Lane l reads 16
// bytes of each row at value offsets l * kVpl + c * 32 * kVpl (c = 0, 1, ...). DEPTH steps of
// loads are in flight: 2, the next step's loads issued before this one is summed (the loop the
// kernels were measured with), or a ring of 1, 3 or 4 (each slot reloaded DEPTH steps on once it
// is summed). The sums' order does not depend on DEPTH.
template <int M, int R, int RA, int BITS, int GS, int DEPTH, typename XT, typename ST>
__device__ __forceinline__ void mlxrt_qmv_rows_of(const XT* x, bool x_vec, const uint32_t* wa, const ST* sa,
                                                  const ST* ba, const uint32_t* wb, const ST* sb, const ST* bb,
                                                  const int (&n)[R], int words, int lane, float (&acc)[M][R]) {
  static_assert(DEPTH >= 1 && RA >= 1 && RA <= R, "a step of loads at least; matrix a's rows first");
  constexpr int kVpw = 32 / BITS;  // values per uint32 word
  constexpr int kVpl = 4 * kVpw;   // values per lane per 16-byte load: one group holds them all
  const int K = words * kVpw;
  const int groups = K / GS;
  const unsigned long long bases =
      reinterpret_cast<unsigned long long>(wa) | (RA < R ? reinterpret_cast<unsigned long long>(wb) : 0ull);
  const bool w_vec = (bases & 15) == 0;
  size_t wrow[R], grow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    wrow[r] = static_cast<size_t>(n[r]) * words;
    grow[r] = static_cast<size_t>(n[r]) * groups;
  }
  auto load = [&](int k, uint4* wv, float* s, float* b) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t* p = (r < RA ? wa : wb) + wrow[r] + k / kVpw;
      wv[r] = w_vec ? *reinterpret_cast<const uint4*>(p) : make_uint4(p[0], p[1], p[2], p[3]);
      s[r] = static_cast<float>((r < RA ? sa : sb)[grow[r] + k / GS]);
      b[r] = static_cast<float>((r < RA ? ba : bb)[grow[r] + k / GS]);
    }
  };
  auto sum_step = [&](int k0, const uint4* wv, const float* s, const float* b) {
    mlxrt_qmv_sum_step<M, R, BITS>(x, x_vec, K, k0, wv, s, b, acc);
  };
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
  constexpr int kStep = 32 * kVpl;
  if constexpr (DEPTH == 2) {
    int k0 = lane * kVpl;
    uint4 cur[R];
    float cs[R], cb[R];
    if (k0 < K) load(k0, cur, cs, cb);
    for (; k0 < K; k0 += kStep) {
      // The next chunk's loads go out before this chunk is summed.
      uint4 nxt[R];
      float ns[R], nb[R];
      if (k0 + kStep < K) load(k0 + kStep, nxt, ns, nb);
      sum_step(k0, cur, cs, cb);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        cur[r] = nxt[r];
        cs[r] = ns[r];
        cb[r] = nb[r];
      }
    }
  } else {
    uint4 ring[DEPTH][R];
    float rs[DEPTH][R], rb[DEPTH][R];
    const int k_lane = lane * kVpl;
#pragma unroll
    for (int d = 0; d < DEPTH; ++d)
      if (k_lane + d * kStep < K) load(k_lane + d * kStep, ring[d], rs[d], rb[d]);
    for (int k_base = k_lane; k_base < K; k_base += DEPTH * kStep) {
#pragma unroll
      for (int d = 0; d < DEPTH; ++d) {
        const int k0 = k_base + d * kStep;
        if (k0 >= K) break;
        sum_step(k0, ring[d], rs[d], rb[d]);
        if (k0 + DEPTH * kStep < K) load(k0 + DEPTH * kStep, ring[d], rs[d], rb[d]);
      }
    }
  }
}

// The rows row0 .. row0 + R - 1 of one w ([N, words]); rows past N repeat row N - 1 (their sums are
// dropped by the caller), so every load is in bounds without a branch in the loop.
template <int M, int R, int BITS, int GS, int DEPTH = 2, typename XT, typename ST>
__device__ __forceinline__ void mlxrt_qmv_rows(const XT* x, bool x_vec, const uint32_t* w, const ST* scales,
                                               const ST* biases, int N, int words, int row0, int lane,
                                               float (&acc)[M][R]) {
  int n[R];
#pragma unroll
  for (int r = 0; r < R; ++r) n[r] = min(row0 + r, N - 1);
  mlxrt_qmv_rows_of<M, R, R, BITS, GS, DEPTH>(x, x_vec, w, scales, biases, w, scales, biases, n, words, lane, acc);
}

// 16 bytes of w from p as four words: one load where w_vec, else 16-bit or 32-bit loads put
// together (values at or past `left` read as 0).
template <typename WT>
__device__ __forceinline__ uint4 mlxrt_load_w16(const WT* p, bool w_vec, int left) {
  if (w_vec) return *reinterpret_cast<const uint4*>(p);
  uint32_t u[4];
  if constexpr (sizeof(WT) == 4) {
    const uint32_t* q = reinterpret_cast<const uint32_t*>(p);
#pragma unroll
    for (int i = 0; i < 4; ++i) u[i] = i < left ? q[i] : 0u;
  } else {
    const unsigned short* q = reinterpret_cast<const unsigned short*>(p);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t lo = 2 * i < left ? q[2 * i] : 0u, hi = 2 * i + 1 < left ? q[2 * i + 1] : 0u;
      u[i] = lo | (hi << 16);
    }
  }
  return make_uint4(u[0], u[1], u[2], u[3]);
}

// The same for dense matrices ([N, K] of x's floating type, the kernels' BITS 0; rows as above: row
// n[r] of a for r < RA, of b after), shared by T threads (a warp: T 32, thread t its lane; or a
// block splitting K): thread t reads 16 bytes of each row at value offsets t * kVpl + u * T * kVpl
// + c * kU * T * kVpl (u < kU: kU loads a row per step, so a warp has twice the bytes in flight of
// the quantized loop while x's rows fit in registers), DEPTH steps of loads in flight as above.
// Float32 products and sums (not cuBLAS's order); each thread's partial sums in acc.
template <int M, int R, int RA, int DEPTH, typename XT, typename WT>
__device__ __forceinline__ void mlxrt_dense_rows_of(const XT* x, bool x_vec, const WT* wa, const WT* wb,
                                                    const int (&n)[R], int K, int t, float (&acc)[M][R], int T) {
  static_assert(DEPTH >= 1 && RA >= 1 && RA <= R, "a step of loads at least; matrix a's rows first");
  constexpr int kVpl = 16 / static_cast<int>(sizeof(WT));  // values per thread per 16-byte load
  constexpr int kPer = 4 / static_cast<int>(sizeof(WT));    // values per 32-bit word
  constexpr int kU = M <= 2 ? 2 : 1;                        // loads per row per step
  const unsigned long long bases =
      reinterpret_cast<unsigned long long>(wa) | (RA < R ? reinterpret_cast<unsigned long long>(wb) : 0ull);
  const bool w_vec = (bases & 15) == 0 && (K % kVpl) == 0;
  const bool xv_ok = x_vec && (K % kVpl) == 0;
  size_t wrow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) wrow[r] = static_cast<size_t>(n[r]) * K;
  // The step at k: kU loads of each row (those at or past K left as zeros).
  auto load = [&](int k, uint4 (*v)[R]) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int ku = k + u * T * kVpl;
#pragma unroll
      for (int r = 0; r < R; ++r)
        v[u][r] = ku < K ? mlxrt_load_w16((r < RA ? wa : wb) + wrow[r] + ku, w_vec, K - ku) : make_uint4(0, 0, 0, 0);
    }
  };
  auto sum_step = [&](int k0, const uint4 (*v)[R]) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int ku = k0 + u * T * kVpl;
      if (ku >= K) break;
      float xv[M][kVpl];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const XT* xm = x + static_cast<size_t>(m) * K + ku;
        if (xv_ok) {
          mlxrt_load_x(xm, xv[m], true);
        } else {
#pragma unroll
          for (int j = 0; j < kVpl; ++j) xv[m][j] = ku + j < K ? static_cast<float>(xm[j]) : 0.0f;
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float f[kPer];
          mlxrt_word_to_float(mlxrt_part(v[u][r], i), f, wa);
#pragma unroll
          for (int m = 0; m < M; ++m)
#pragma unroll
            for (int j = 0; j < kPer; ++j) acc[m][r] = fmaf(f[j], xv[m][i * kPer + j], acc[m][r]);
        }
    }
  };
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
  const int kStep = kU * T * kVpl;
  if constexpr (DEPTH == 2) {
    int k0 = t * kVpl;
    uint4 cur[kU][R];
    if (k0 < K) load(k0, cur);
    for (; k0 < K; k0 += kStep) {
      // The next step's loads go out before this step is summed.
      uint4 nxt[kU][R];
      if (k0 + kStep < K) load(k0 + kStep, nxt);
      sum_step(k0, cur);
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r) cur[u][r] = nxt[u][r];
    }
  } else {
    uint4 ring[DEPTH][kU][R];
    const int k_thread = t * kVpl;
#pragma unroll
    for (int d = 0; d < DEPTH; ++d)
      if (k_thread + d * kStep < K) load(k_thread + d * kStep, ring[d]);
    for (int k_base = k_thread; k_base < K; k_base += DEPTH * kStep) {
#pragma unroll
      for (int d = 0; d < DEPTH; ++d) {
        const int k0 = k_base + d * kStep;
        if (k0 >= K) break;
        sum_step(k0, ring[d]);
        if (k0 + DEPTH * kStep < K) load(k0 + DEPTH * kStep, ring[d]);
      }
    }
  }
}

// The rows row0 .. row0 + R - 1 of one dense w ([N, K]); rows past N repeat row N - 1.
template <int M, int R, int DEPTH = 2, typename XT, typename WT>
__device__ __forceinline__ void mlxrt_dense_rows(const XT* x, bool x_vec, const WT* w, int N, int K, int row0,
                                                 int t, float (&acc)[M][R], int T = 32) {
  int n[R];
#pragma unroll
  for (int r = 0; r < R; ++r) n[r] = min(row0 + r, N - 1);
  mlxrt_dense_rows_of<M, R, R, DEPTH>(x, x_vec, w, w, n, K, t, acc, T);
}

// Either product by the kernels' BITS: 0 a dense w (`cols` its K, scales and biases unused), else
// affine-quantized (`cols` its words per row).
template <int M, int R, int BITS, int GS, int DEPTH = 2, typename XT, typename WT, typename ST>
__device__ __forceinline__ void mlxrt_mv_rows(const XT* x, bool x_vec, const WT* w, const ST* scales,
                                              const ST* biases, int N, int cols, int row0, int lane,
                                              float (&acc)[M][R]) {
  if constexpr (BITS == 0) {
    mlxrt_dense_rows<M, R, DEPTH>(x, x_vec, w, N, cols, row0, lane, acc);
  } else {
    mlxrt_qmv_rows<M, R, BITS, GS, DEPTH>(x, x_vec, w, scales, biases, N, cols, row0, lane, acc);
  }
}

// Rows row0 .. row0 + RH - 1 of two matrices of one shape and kind in one pass (gate's and up's):
// acc[m][r] is row row0 + r of a for r < RH, row row0 + r - RH of b after; rows past N repeat N - 1.
template <int M, int RH, int BITS, int GS, int DEPTH, typename XT, typename WT, typename ST>
__device__ __forceinline__ void mlxrt_mv_row_pairs(const XT* x, bool x_vec, const WT* wa, const ST* sa,
                                                   const ST* ba, const WT* wb, const ST* sb, const ST* bb, int N,
                                                   int cols, int row0, int lane, float (&acc)[M][2 * RH]) {
  int n[2 * RH];
#pragma unroll
  for (int r = 0; r < 2 * RH; ++r) n[r] = min(row0 + (r < RH ? r : r - RH), N - 1);
  if constexpr (BITS == 0) {
    mlxrt_dense_rows_of<M, 2 * RH, RH, DEPTH>(x, x_vec, wa, wb, n, cols, lane, acc, 32);
  } else {
    mlxrt_qmv_rows_of<M, 2 * RH, RH, BITS, GS, DEPTH>(x, x_vec, wa, sa, ba, wb, sb, bb, n, cols, lane, acc);
  }
}

// The rows of one task of a phase (mlxrt_qmv_tasks): row n[r] of matrix a (w, scales, biases) for
// r < RA, of matrix b after, as mlxrt_qmv_rows_of and mlxrt_dense_rows_of take them.
template <typename WT, typename ST, int R>
struct mlxrt_rows_task {
  const WT* wa;
  const ST* sa;
  const ST* ba;
  const WT* wb;
  const ST* sb;
  const ST* bb;
  int n[R];
};

// A warp's quantized tasks t0, t0 + G, ... below T as one stream of loads (mlxrt_qmv_tasks): each
// task's rows summed as mlxrt_qmv_rows_of sums them at depth 2 (each lane the same steps in the
// same order, so the same bytes), but the next task's first step is loaded before this task's
// last step is summed. Why: a task is short (4-bit rows of 4096 values are 4 steps, of 1024 one),
// and a task whose loads start only after the last one's sums waits out a whole memory latency
// with none of its warp's loads in flight.
// XS: x's rows (const XT*), or one row as int8 (mlxrt_q8_row: 4-bit rows, M 1).
template <int M, int R, int RA, int BITS, int GS, typename XS, typename Task, typename Done>
__device__ __forceinline__ void mlxrt_qmv_task_stream(XS x, bool x_vec, int words, int t0, int G, int T,
                                                      int lane, Task task, Done done) {
  static_assert(RA >= 1 && RA <= R, "matrix a's rows first");
  static_assert(!mlxrt_is_q8<XS>::value || (BITS == 4 && M == 1), "int8 x: one row against 4-bit rows");
  constexpr int kVpw = 32 / BITS;
  constexpr int kVpl = 4 * kVpw;
  constexpr int kStep = 32 * kVpl;
  const int K = words * kVpw;
  const int groups = K / GS;
  const int steps = (K + kStep - 1) / kStep;  // the warp's; a lane's own are those below K
  const int k_lane = lane * kVpl;
  // The 16 bytes at k of each of the task's rows, with their groups' scales and biases. (Not a
  // generic lambda: NVRTC without MLX's options takes those for host code.) Read as global,
  // read-only memory (__ldg): the layer kernel's rows come from its table of addresses, which the
  // compiler cannot tell are global, and it would read them with generic loads (LD, which first
  // find out which memory an address is in) where its pointer parameters had global ones.
  using TaskRows = decltype(task(0));
  auto load = [&](const TaskRows& tk, int k, uint4* wv, float* s, float* b) {
    const unsigned long long bases = reinterpret_cast<unsigned long long>(tk.wa) |
                                     (RA < R ? reinterpret_cast<unsigned long long>(tk.wb) : 0ull);
    const bool w_vec = (bases & 15) == 0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t* p = reinterpret_cast<const uint32_t*>(r < RA ? tk.wa : tk.wb) +
                          static_cast<size_t>(tk.n[r]) * words + k / kVpw;
      wv[r] = w_vec ? __ldg(reinterpret_cast<const uint4*>(p))
                    : make_uint4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
      const size_t g = static_cast<size_t>(tk.n[r]) * groups + k / GS;
      s[r] = static_cast<float>(__ldg((r < RA ? tk.sa : tk.sb) + g));
      b[r] = static_cast<float>(__ldg((r < RA ? tk.ba : tk.bb) + g));
    }
  };
  if (t0 >= T) return;
  uint4 cur[R];
  float cs[R], cb[R];
  if (k_lane < K) load(task(t0), k_lane, cur, cs, cb);
  for (int t = t0; t < T; t += G) {
    const auto tk = task(t);
    float acc[M][R];
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
    for (int c = 0; c < steps; ++c) {
      const int k0 = k_lane + c * kStep;
      uint4 nxt[R];
      float ns[R], nb[R];
      if (c + 1 < steps) {
        if (k0 + kStep < K) load(tk, k0 + kStep, nxt, ns, nb);
      } else if (t + G < T && k_lane < K) {
        load(task(t + G), k_lane, nxt, ns, nb);  // the next task's first step, across the boundary
      }
      if (k0 < K) {
        if constexpr (mlxrt_is_q8<XS>::value)
          mlxrt_q4_sum_step_q8<R>(x, k0, cur, cs, cb, acc);
        else
          mlxrt_qmv_sum_step<M, R, BITS>(x, x_vec, K, k0, cur, cs, cb, acc);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        cur[r] = nxt[r];
        cs[r] = ns[r];
        cb[r] = nb[r];
      }
    }
    done(t, acc);
  }
}

// A warp's tasks t0, t0 + G, ... below T of one phase: task(t) gives task t's rows (an
// mlxrt_rows_task of R rows, RA of them from matrix a), done(t, acc) takes each lane's partial sums
// of them (float[M][R]). `cols` as mlxrt_qmv_warp's. STREAM: quantized rows at depth 2 go through
// mlxrt_qmv_task_stream (the same bytes); else each task alone, as mlxrt_mv_row_pairs. x: the rows
// of x (const XT*), or with STREAM and 4-bit rows one row as int8 (mlxrt_q8_row).
template <int M, int R, int RA, int BITS, int GS, int DEPTH, bool STREAM, typename XS, typename Task, typename Done>
__device__ __forceinline__ void mlxrt_qmv_tasks(XS x, bool x_vec, int cols, int t0, int G, int T, int lane,
                                                Task task, Done done) {
  static_assert(!mlxrt_is_q8<XS>::value || (STREAM && BITS == 4 && DEPTH == 2), "int8 x: the stream's 4-bit steps");
  if constexpr (STREAM && BITS != 0 && DEPTH == 2) {
    mlxrt_qmv_task_stream<M, R, RA, BITS, GS>(x, x_vec, cols, t0, G, T, lane, task, done);
  } else {
    for (int t = t0; t < T; t += G) {
      const auto tk = task(t);
      float acc[M][R];
      if constexpr (BITS == 0) {
        mlxrt_dense_rows_of<M, R, RA, DEPTH>(x, x_vec, tk.wa, tk.wb, tk.n, cols, lane, acc, 32);
      } else {
        mlxrt_qmv_rows_of<M, R, RA, BITS, GS, DEPTH>(x, x_vec, tk.wa, tk.sa, tk.ba, tk.wb, tk.sb, tk.bb, tk.n, cols,
                                                     lane, acc);
      }
      done(t, acc);
    }
  }
}

// A warp's rows row0 .. row0 + R - 1 of w (those below N): write(i, sum) with i = m * N + n, the
// index of output row m, column n, from one lane each. `cols`: w's row length in its own elements
// (words of a quantized w, values of a dense one).
template <int M, int R, int BITS, int GS, int DEPTH = 2, typename XT, typename WT, typename ST, typename Write>
__device__ __forceinline__ void mlxrt_qmv_warp(const XT* x, bool x_vec, const WT* w, const ST* scales,
                                               const ST* biases, int N, int cols, int row0, Write write) {
  const int lane = threadIdx.x & 31;
  float acc[M][R];
  mlxrt_mv_rows<M, R, BITS, GS, DEPTH>(x, x_vec, w, scales, biases, N, cols, row0, lane, acc);
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float v = mlxrt_warp_sum(acc[m][r]);
      if (lane == ((m * R + r) & 31) && row0 + r < N) write(static_cast<size_t>(m) * N + row0 + r, v);
    }
}
)";

// The fused kernels' RMSNorm of x staged in shared memory (fused_qmv.cpp, decoder_layer.cpp).
constexpr const char* kStageRmsNormDevice = R"(
// The M rows of x (K values each) into xs, as mx.fast.rms_norm leaves them: the float32 sum of
// squares (the block's), rsqrt(sum / K + eps), x times that rounded to XT, times the weight, rounded
// again. red: 32 floats of shared memory. Every thread of the block calls it.
template <int M, typename XT>
__device__ __forceinline__ void mlxrt_stage_rms_norm(const XT* x, const XT* nw, float eps, int K, XT* xs,
                                                     float* red) {
  const int nwarps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll 1
  for (int m = 0; m < M; ++m) {
    const XT* xm = x + static_cast<size_t>(m) * K;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < K; i += blockDim.x) {
      const float v = static_cast<float>(xm[i]);
      ss += v * v;
    }
    ss = mlxrt_warp_sum(ss);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    const float total = mlxrt_warp_sum(lane < nwarps ? red[lane] : 0.0f);
    const float rs = rsqrtf(total / K + eps);
    for (int i = threadIdx.x; i < K; i += blockDim.x) {
      const XT y = static_cast<XT>(static_cast<float>(xm[i]) * rs);
      xs[static_cast<size_t>(m) * K + i] = static_cast<XT>(static_cast<float>(nw[i]) * static_cast<float>(y));
    }
    __syncthreads();  // red is written again for the next row; xs is read after the last
  }
}
)";

}  // namespace mlxrt::kernels::cuda::detail
