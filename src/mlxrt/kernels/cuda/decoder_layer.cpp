// A llama-style decoder layer's decoding step as one CUDA kernel: the kernel and its launch. What
// it computes, why, and what is left before the model uses it: decoder_layer.h.
#include "mlxrt/kernels/cuda/decoder_layer.h"

#include <algorithm>
#include <cstdlib>
#include <bit>
#include <cmath>
#include <string>

#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/kernels/cuda/affine_qmv.h"
#include "mlxrt/kernels/cuda/cuda_driver.h"
#include "mlxrt/kernels/cuda/env_knob.h"
#include "mlxrt/kernels/cuda/qmv_device.h"
#include "mlxrt/kernels/cuda/rope_device.h"

namespace mlxrt::kernels::cuda {

namespace {

// The grid-wide barrier: `bar` holds the arrivals (word 0) and a generation (word `gen_word`,
// kDecoderLayerGenerationWord, on a line of its own: the waiting blocks poll it while the others
// add to the count). Each block's thread 0 reads the generation, then arrives; the last to arrive
// resets the count and moves the generation on, the others wait for that. Every launch leaves the
// count at 0 (each barrier is passed by every block), so the buffer serves the next launch as it
// is. With COUNT (DecoderLayerGrid::count_barrier) the count alone: it ends a launch at four times
// the grid, a multiple of it, from which the same buffer would serve again. Needs the grid
// resident at once.
constexpr const char* kLayerDevice = R"(
#ifdef __CUDA_ARCH__
// The GPU's nanosecond clock, common to its multiprocessors (the phases' stamps).
__device__ __forceinline__ unsigned long long mlxrt_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Asks for the 128-byte line at global address p ahead of its loads: into L2 (LEVEL 1) or this
// multiprocessor's L1 (2). No result, no wait: a hint the memory system may drop.
template <int LEVEL>
__device__ __forceinline__ void mlxrt_prefetch_line(const void* p) {
  if constexpr (LEVEL == 2)
    asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
  else
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
#endif
// A product phase's x: the rows as they are, or (Q8) their int8 copy in shared memory.
template <bool Q8, typename XT>
__device__ __forceinline__ auto mlxrt_layer_x(const XT* x, const int* q, const float2* ds) {
  if constexpr (Q8)
    return mlxrt_q8_row{q, ds};
  else
    return x;
}
// The weight table's slots (decoder_layer.h's kDecoderLayerWeightSlots, whose order the host checks
// against these lines).
constexpr int kW_nw1 = 0, kW_wq = 1, kW_sq = 2, kW_bq = 3, kW_wk = 4, kW_sk = 5, kW_bk = 6, kW_wv = 7, kW_sv = 8,
              kW_bv = 9, kW_qnw = 10, kW_knw = 11, kW_freqs = 12, kW_wo = 13, kW_so = 14, kW_bo = 15, kW_nw2 = 16,
              kW_wg = 17, kW_sg = 18, kW_bg = 19, kW_wu = 20, kW_su = 21, kW_bu = 22, kW_wd = 23, kW_sd = 24,
              kW_bd = 25, kWeightSlots = 26;
// A weight of the layer by its slot in the table of addresses (decoder_layer.h's
// DecoderLayerWeightTable), read where it is used: the table sits in shared memory, so a pointer
// costs a shared load at a task's start rather than a register for the whole kernel.
template <typename T>
__device__ __forceinline__ const T* mlxrt_weight(const unsigned long long* table, int slot) {
  return reinterpret_cast<const T*>(table[slot]);
}
template <bool COUNT>
__device__ __forceinline__ void mlxrt_grid_sync(unsigned* bar, int gen_word, unsigned long long* arrival) {
  __syncthreads();
  if (threadIdx.x == 0) {
    *arrival = mlxrt_globaltimer();  // this block's end of the phase (decoder_layer.h's block stamps)
    if constexpr (COUNT) {
      // DecoderLayerGrid::count_barrier: the count only grows (by the grid at each barrier), and a
      // block waits for the next multiple of the grid past its own arrival. The last block to
      // arrive has nothing more to write: no reset, no generation, one atomic on the way.
      __threadfence();
      const unsigned before = atomicAdd(bar, 1u);
      const unsigned target = (before / gridDim.x + 1) * gridDim.x;
      volatile unsigned* count = bar;
      unsigned spins = 0;
      while (before + 1 != target && *count < target) {
        __nanosleep(32);
        if (++spins == (1u << 26)) __trap();
      }
    } else {
      volatile unsigned* generation = bar + gen_word;
      const unsigned g = *generation;
      __threadfence();
      if (atomicAdd(bar, 1u) == gridDim.x - 1) {
        atomicExch(bar, 0u);
        __threadfence();
        atomicAdd(bar + gen_word, 1u);
      } else {
        // A grid that is not resident at once would wait here for ever: stop the kernel instead
        // (an error MLX reports) after ~2^26 pauses, seconds where a real wait is microseconds.
        unsigned spins = 0;
        while (*generation == g) {
          __nanosleep(32);
          if (++spins == (1u << 26)) __trap();
        }
      }
    }
    __threadfence();
  }
  // The block's one barrier, outside thread 0's branch: __syncthreads is an aligned barrier, which
  // every thread of a warp must reach at the same instruction (one inside the branch hangs).
  __syncthreads();
}
)";

// The phases (decoder_layer.h). Work is spread over the grid's warps: warp `gw` of `G` takes
// tasks gw, gw + G, ...; a product's task is R rows (mlxrt_qmv_warp; gate and up R rows of each;
// q, k and v RQ rows: decoder_layer_qkv_rows), an attention task a (query head, chunk of keys).
constexpr const char* kSource = R"(
  __shared__ __align__(16) unsigned char xs_bytes[K * sizeof(XT)];
  // Q8X (4-bit rows, the stream at depth 2): each product phase's x as int8 (mlxrt_q8_stage), for
  // the longest of the phases' rows (K, H * D, I).
  constexpr bool kQ8 = Q8X && BITS == 4 && STREAM && DEPTH == 2;
  constexpr int kQ8Values = kQ8 ? (K > I ? (K > H * D ? K : H * D) : (I > H * D ? I : H * D)) : 32;
  __shared__ __align__(16) int q8_words[kQ8Values / 4];
  __shared__ float2 q8_ds[kQ8Values / 32];
  __shared__ float red[32];
  __shared__ float rows[NW][D];
  __shared__ float scores[NW][CHUNK];
  // Each warp's rotated query and new key, in the model's type (raw bytes: see xs_bytes).
  __shared__ __align__(16) unsigned char qx_bytes[NW * D * sizeof(XT)];
  __shared__ __align__(16) unsigned char kx_bytes[NW * D * sizeof(XT)];
  XT* xs = reinterpret_cast<XT*>(xs_bytes);
  // The layer's weights' addresses (one input instead of kDecoderLayerWeightSlots), staged in shared
  // memory once a block. Loaded here, stored after phase 1's RMSNorm: the load's latency passes
  // beside the norm's reads of x instead of before them.
  __shared__ unsigned long long wt_shared[kWeightSlots];
  const unsigned long long my_slot = threadIdx.x < kWeightSlots ? static_cast<unsigned long long>(tab[threadIdx.x]) : 0ull;
  const unsigned long long* const wt = wt_shared;  // (lambdas copy what they capture: a pointer, not the array)
  // The phases' results, for the tests, in one scratch output at the launch's byte offsets
  // (decoder_layer_scratch): one output instead of ten keeps the host's cost per node down.
  XT* xn1 = reinterpret_cast<XT*>(scratch + OFF_XN1);
  XT* qkv = reinterpret_cast<XT*>(scratch + OFF_QKV);
  XT* qr = reinterpret_cast<XT*>(scratch + OFF_QR);
  float* part = reinterpret_cast<float*>(scratch + OFF_PART);
  XT* attn = reinterpret_cast<XT*>(scratch + OFF_ATTN);
  XT* hres = reinterpret_cast<XT*>(scratch + OFF_HRES);
  XT* xn2 = reinterpret_cast<XT*>(scratch + OFF_XN2);
  XT* act = reinterpret_cast<XT*>(scratch + OFF_ACT);
  unsigned* done = reinterpret_cast<unsigned*>(scratch + OFF_DONE);
  unsigned* barrier = const_cast<unsigned*>(bar);
  XT* kcache = const_cast<XT*>(kc);
  XT* vcache = const_cast<XT*>(vc);
  const int S = kc_shape[2];
  // The position is read once a block, by thread 0 at the start, and shared past the first
  // barrier: the host writes it (MLX keeps such scalars in host-resident managed memory, which the
  // GPU reads over the bus), so one read a block, behind phase 1, instead of one a thread.
  __shared__ int pos_shared;
  if (threadIdx.x == 0) pos_shared = off[0];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gw = blockIdx.x * NW + warp, G = gridDim.x * NW;
  // part's chunks per head: CHUNK keys each, or shorter ones where a head has at most G / H of them
  // (phase 2; the launch sizes part the same way).
  const int ch_max = max((S + CHUNK - 1) / CHUNK, G / H);
  constexpr int NQ = H * D, NK = HK * D;
  XT* yq = qkv;
  XT* yk = qkv + NQ;
  XT* yv = qkv + NQ + NK;
  // The phases' stamps (decoder_layer.h): block 0's thread 0 at the start and past each barrier;
  // the last block's end by an atomic maximum on a slot block 0 clears before the first barrier.
  unsigned long long* stamp_at = reinterpret_cast<unsigned long long*>(scratch + OFF_STAMPS);
  auto stamp = [&](int i) {
    if (blockIdx.x == 0 && threadIdx.x == 0) stamp_at[i] = mlxrt_globaltimer();
  };
  stamp(0);
  // Each block's start and its arrival at each of the four barriers (kDecoderLayerBlockStamps).
  unsigned long long* block_stamp =
      reinterpret_cast<unsigned long long*>(scratch + OFF_BLOCK_STAMPS) + static_cast<size_t>(blockIdx.x) * 5;
  if (threadIdx.x == 0) block_stamp[0] = mlxrt_globaltimer();
  unsigned* head_done = done;
  if (blockIdx.x == 0) {
    if (threadIdx.x == 0) stamp_at[5] = 0ull;
    // Phase 2's count of finished chunks per head (read after the first barrier).
    for (int i = threadIdx.x; i < H; i += blockDim.x) head_done[i] = 0u;
  }

  // Tasks of the products over K outputs (o_proj, down) and over I (gate and up).
  constexpr int tasks_o = (K + R - 1) / R, tasks_gu = (I + R - 1) / R;
  // o_proj's and down's task t: rows t * R .. of one matrix of K rows (the last repeated past K),
  // the matrix whose weights are at slot m (its scales and biases the next two).
  auto rows_of = [&](int m) {
    return [=](int t) {
      const WT* w = mlxrt_weight<WT>(wt, m);
      const ST* s = mlxrt_weight<ST>(wt, m + 1);
      const ST* b = mlxrt_weight<ST>(wt, m + 2);
      mlxrt_rows_task<WT, ST, R> k{w, s, b, w, s, b};
#pragma unroll
      for (int r = 0; r < R; ++r) k.n[r] = min(t * R + r, K - 1);
      return k;
    };
  };
  // Their sums, each rounded to XT and added to the residual: out[i] = base[i] + round(sum).
  auto residual_into = [&](XT* out, const XT* base) {
    return [=](int t, float (&acc)[1][R]) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int i = t * R + r;
        const float v = mlxrt_warp_sum(acc[0][r]);
        if (lane == (r & 31) && i < K)
          out[i] = static_cast<XT>(static_cast<float>(base[i]) + static_cast<float>(static_cast<XT>(v)));
      }
    };
  };

  // 1. RMSNorm(x) staged; the rows of q, k and v.
  mlxrt_stage_rms_norm<1>(x, reinterpret_cast<const XT*>(tab[kW_nw1]), __int_as_float(EPS1_BITS), K, xs, red);
  if (threadIdx.x < kWeightSlots) wt_shared[threadIdx.x] = my_slot;
  __syncthreads();
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < K; i += blockDim.x) xn1[i] = xs[i];  // for the tests: every block staged this
  {
    constexpr int tq = (NQ + RQ - 1) / RQ, tk = (NK + RQ - 1) / RQ;
    // Task t's matrix (q, then k, then v), its output and its first row.
    auto qkv_of = [&](int t, const WT*& w, const ST*& s, const ST*& b, XT*& y, int& N, int& row0) {
      int m = 0;  // the slot of q's matrix; k's and v's three and six on
      y = yq; N = NQ; row0 = t * RQ;
      if (t >= tq + tk) {
        m = 6; y = yv; N = NK; row0 = (t - tq - tk) * RQ;
      } else if (t >= tq) {
        m = 3; y = yk; N = NK; row0 = (t - tq) * RQ;
      }
      w = mlxrt_weight<WT>(wt, kW_wq + m);
      s = mlxrt_weight<ST>(wt, kW_sq + m);
      b = mlxrt_weight<ST>(wt, kW_bq + m);
    };
    auto task = [&](int t) {
      mlxrt_rows_task<WT, ST, RQ> k;
      XT* y;
      int N, row0;
      qkv_of(t, k.wa, k.sa, k.ba, y, N, row0);
      k.wb = k.wa; k.sb = k.sa; k.bb = k.ba;
#pragma unroll
      for (int r = 0; r < RQ; ++r) k.n[r] = min(row0 + r, N - 1);
      return k;
    };
    if constexpr (kQ8) mlxrt_q8_stage(xs, K, q8_words, q8_ds);
    mlxrt_qmv_tasks<1, RQ, RQ, BITS, GS, DEPTH, STREAM>(mlxrt_layer_x<kQ8>(xs, q8_words, q8_ds), true, COLS, gw, G,
                                                       tq + 2 * tk, lane, task,
                                                       [&](int t, float (&acc)[1][RQ]) {
      const WT* w;
      const ST* s;
      const ST* b;
      XT* y;
      int N, row0;
      qkv_of(t, w, s, b, y, N, row0);
#pragma unroll
      for (int r = 0; r < RQ; ++r) {
        const float v = mlxrt_warp_sum(acc[0][r]);
        if (lane == (r & 31) && row0 + r < N) y[row0 + r] = static_cast<XT>(v);
      }
    });
  }
  mlxrt_grid_sync<BAR_COUNT>(barrier, GEN_WORD, block_stamp + 1);
  stamp(1);
  const int pos = pos_shared;

  // 2. A warp per (query head, chunk of keys): the head's q/k norms and RoPE (qk_rope's device
  // code), each lane a key's score, then the chunk's maximum, sum and weighted values; the last of
  // a head's chunks to finish combines them. The new position's key and value are the task's own
  // (computed again by each task that needs them: D values) and are written into the cache by one
  // task a key head; no task reads the cache at that position. The chunk is CHUNK keys, halved
  // (down to 32) while the halves still give every task a warp of the grid: a short context's few
  // chunks would leave most warps idle and each busy one reading its keys and values alone (ch_max
  // holds the most chunks a head gets).
  const int n_keys = pos + 1;
  int clen = CHUNK;
  while (clen > 32 && H * ((n_keys + clen / 2 - 1) / (clen / 2)) <= G) clen /= 2;
  const int chunks = (n_keys + clen - 1) / clen;
  constexpr int kDims = (D + 31) / 32;
  // The weighted values by key groups where a row's values are whole 16-byte loads for a power of
  // two of lanes (kL): lanes l and l + kL take keys j and j + 32 / kL, each lane kV dimensions, so a
  // warp has several rows' loads in flight; else lane l holds dimensions l, l + 32, ... of every key.
  constexpr int kV = 16 / static_cast<int>(sizeof(XT));
  constexpr int kL = D / kV;
  constexpr bool kGrouped = D % kV == 0 && kL <= 32 && (32 % kL) == 0;
  XT* qx = reinterpret_cast<XT*>(qx_bytes) + warp * D;
  XT* kx = reinterpret_cast<XT*>(kx_bytes) + warp * D;
  const float angle = __int_as_float(SCALE_BITS) * static_cast<float>(pos);
  // ATT_SPREAD: task t on warp t / blocks of block t % blocks. This phase has fewer tasks than the
  // grid has warps (a few hundred of thousands), and by gw they would fill every warp of the first
  // blocks, a few multiprocessors each reading eight warps' keys and values; spread, each
  // multiprocessor holds one or two tasks' loads. ATT_SPREAD 2 (where the query heads of a key head,
  // kGq, divide the block's warps): the kGq tasks of one key head's chunk go to kGq warps of one
  // block, which read the same keys and values, so that their loads meet in that multiprocessor's
  // L1 instead of each going to L2, and they share the prefetch (each warp a kGq-th of the lines).
  constexpr int kGq = H / HK;
  constexpr bool kGroupTasks = ATT_SPREAD == 2 && NW % kGq == 0;
  const int blocks = static_cast<int>(gridDim.x), block = static_cast<int>(blockIdx.x);
  // Task u: (h, c) = (u / chunks, u % chunks), or grouped (key head u / chunks, chunk u % chunks)
  // for this warp's query head of the group.
  const int u_first = kGroupTasks ? (warp / kGq) * blocks + block : ATT_SPREAD ? warp * blocks + block : gw;
  const int u_step = kGroupTasks ? (NW / kGq) * blocks : G;
  const int u_end = kGroupTasks ? HK * chunks : H * chunks;
  for (int u = u_first; u < u_end; u += u_step) {
    const int h = kGroupTasks ? (u / chunks) * kGq + warp % kGq : u / chunks, c = u % chunks;
    const int hk = h / kGq;
    const XT* kh = kcache + static_cast<size_t>(hk) * S * D;
    const XT* vh = vcache + static_cast<size_t>(hk) * S * D;
    const XT* v_new = yv + hk * D;
    const int k0 = c * clen, k1 = min(k0 + clen, n_keys);
    if constexpr (ATT_PF != 0) {
      // The chunk's cached keys and values asked for before anything else (ATT_PF 1: into L2, 2:
      // into this multiprocessor's L1): the task's chain of waits (the query's norm and RoPE, the
      // keys, the maximum, the values a few rows at a time) then meets its memory's latency once
      // instead of at each step. Rows k0 .. the new position's, which is the task's own; the same
      // loads and sums follow, so the same bytes. ATT_PF_LINES > 0: the first that many lines of each.
      size_t bytes = static_cast<size_t>(max(min(k1, pos) - k0, 0)) * D * sizeof(XT);
      if constexpr (ATT_PF_LINES > 0) bytes = min(bytes, static_cast<size_t>(ATT_PF_LINES) * 128u);
      const unsigned long long kb = reinterpret_cast<unsigned long long>(kh + static_cast<size_t>(k0) * D);
      const unsigned long long vb = reinterpret_cast<unsigned long long>(vh + static_cast<size_t>(k0) * D);
      const int pf_lane = kGroupTasks ? lane * kGq + warp % kGq : lane, pf_lanes = kGroupTasks ? 32 * kGq : 32;
      for (unsigned long long o = pf_lane * 128ull; bytes > 0 && o < 128ull + bytes; o += pf_lanes * 128ull) {
        if (o < (kb & 127ull) + bytes) mlxrt_prefetch_line<ATT_PF>(reinterpret_cast<const void*>((kb & ~127ull) + o));
        if (o < (vb & 127ull) + bytes) mlxrt_prefetch_line<ATT_PF>(reinterpret_cast<const void*>((vb & ~127ull) + o));
      }
    }
    float* sc = scores[warp];
    float* row = rows[warp];
    if (k1 == n_keys) {
      // The new key, rotated; the first query head of its group writes it and the value in place.
      mlxrt_norm_head<XT, D, NORM>(yk + hk * D, mlxrt_weight<XT>(wt, kW_knw), __int_as_float(EPS_K_BITS), row, lane);
      mlxrt_rope_row<XT, D, ROT, TRAD, FREQS>(row, angle, mlxrt_weight<float>(wt, kW_freqs), __int_as_float(LOG2_BASE_BITS), kx, lane);
      __syncwarp();  // kx is read by every lane; row is the query's next
      if (h % (H / HK) == 0) {
        XT* kdst = kcache + (static_cast<size_t>(hk) * S + pos) * D;
        XT* vdst = vcache + (static_cast<size_t>(hk) * S + pos) * D;
        for (int i = lane; i < D; i += 32) {
          kdst[i] = kx[i];
          vdst[i] = v_new[i];
        }
      }
    }
    // The query, rotated and rounded to the model's type, then in shared memory as floats (every
    // lane reads all of it); the first chunk's task keeps it for the tests.
    mlxrt_norm_head<XT, D, NORM>(yq + h * D, mlxrt_weight<XT>(wt, kW_qnw), __int_as_float(EPS_Q_BITS), row, lane);
    mlxrt_rope_row<XT, D, ROT, TRAD, FREQS>(row, angle, mlxrt_weight<float>(wt, kW_freqs), __int_as_float(LOG2_BASE_BITS), qx, lane);
    __syncwarp();
    float* qs = row;
    for (int i = lane; i < D; i += 32) {
      qs[i] = static_cast<float>(qx[i]);
      if (c == 0) qr[h * D + i] = qx[i];
    }
    __syncwarp();
    // A lane's key in 16-byte loads where its rows allow.
    const bool kvec = D % kV == 0 && (reinterpret_cast<unsigned long long>(kh) & 15) == 0;
    float m = __int_as_float(0xff800000);
    for (int j = k0 + lane; j < k1; j += 32) {
      const XT* kj = j == pos ? kx : kh + static_cast<size_t>(j) * D;
      float dot = 0.0f;
      if (kvec) {
        for (int i = 0; i < D; i += kV) {
          float kv[kV];
          mlxrt_load_x(kj + i, kv, true);
#pragma unroll
          for (int e = 0; e < kV; ++e) dot = fmaf(qs[i + e], kv[e], dot);
        }
      } else {
        for (int i = 0; i < D; ++i) dot = fmaf(qs[i], static_cast<float>(kj[i]), dot);
      }
      const float sj = dot * __int_as_float(ATT_SCALE_BITS);
      sc[j - k0] = sj;
      m = fmaxf(m, sj);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    __syncwarp();
    float l = 0.0f;
    for (int j = k0 + lane; j < k1; j += 32) {
      const float p = expf(sc[j - k0] - m);
      sc[j - k0] = p;
      l += p;
    }
    l = mlxrt_warp_sum(l);
    __syncwarp();
    float* out = part + (static_cast<size_t>(h) * ch_max + c) * (D + 2);
    if (kGrouped && ((reinterpret_cast<unsigned long long>(vh) | reinterpret_cast<unsigned long long>(v_new)) & 15) == 0) {
      constexpr int kG = kGrouped ? kL : 32;  // (a valid shift where the branch is not taken)
      const int slot = lane / kG, d0 = (lane % kG) * kV;
      float acc[kV];
#pragma unroll
      for (int e = 0; e < kV; ++e) acc[e] = 0.0f;
#pragma unroll 4
      for (int j = k0 + slot; j < k1; j += 32 / kG) {
        const float p = sc[j - k0];
        float vv[kV];
        mlxrt_load_x((j == pos ? v_new : vh + static_cast<size_t>(j) * D) + d0, vv, true);
#pragma unroll
        for (int e = 0; e < kV; ++e) acc[e] = fmaf(p, vv[e], acc[e]);
      }
#pragma unroll
      for (int o = kG; o < 32; o <<= 1)
#pragma unroll
        for (int e = 0; e < kV; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], o);
      if (slot == 0)
#pragma unroll
        for (int e = 0; e < kV; ++e) out[2 + d0 + e] = acc[e];
    } else {
      float acc[kDims];
#pragma unroll
      for (int d = 0; d < kDims; ++d) acc[d] = 0.0f;
      for (int j = k0; j < k1; ++j) {
        const float p = sc[j - k0];
        const XT* vj = j == pos ? v_new : vh + static_cast<size_t>(j) * D;
#pragma unroll
        for (int d = 0; d < kDims; ++d)
          if (lane + 32 * d < D) acc[d] = fmaf(p, static_cast<float>(vj[lane + 32 * d]), acc[d]);
      }
#pragma unroll
      for (int d = 0; d < kDims; ++d)
        if (lane + 32 * d < D) out[2 + lane + 32 * d] = acc[d];
    }
    if (lane == 0) {
      out[0] = m;
      out[1] = l;
    }
    // The head's last chunk to finish combines them all (no barrier between the two): each warp
    // publishes its partial sums (every lane fences its own writes) before counting itself in; the
    // one that completes the count sees every other's, and reads them with loads cached in L2
    // alone (__ldcg: another multiprocessor's writes do not reach this one's L1). Those loads are
    // not volatile, so the chunks' loads can be in flight together: the lanes take the maxima a
    // chunk each, and the sums below may be loaded ahead of their use (their order is kept).
    __threadfence();
    __syncwarp();
    unsigned last = 0;
    if (lane == 0) last = atomicAdd(&head_done[h], 1u) == static_cast<unsigned>(chunks - 1);
    if (__shfl_sync(0xffffffffu, last, 0)) {
      __threadfence();
      const float* ph = part + static_cast<size_t>(h) * ch_max * (D + 2);
      float mx = __int_as_float(0xff800000);
      for (int cc = lane; cc < chunks; cc += 32) mx = fmaxf(mx, __ldcg(ph + cc * (D + 2)));
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      float total = 0.0f;
      float acc[kDims];
#pragma unroll
      for (int d = 0; d < kDims; ++d) acc[d] = 0.0f;
#pragma unroll 4
      for (int cc = 0; cc < chunks; ++cc) {
        const float* pc = ph + cc * (D + 2);
        const float f = expf(__ldcg(pc) - mx);
        total = fmaf(__ldcg(pc + 1), f, total);
#pragma unroll
        for (int d = 0; d < kDims; ++d)
          if (lane + 32 * d < D) acc[d] = fmaf(__ldcg(pc + 2 + lane + 32 * d), f, acc[d]);
      }
#pragma unroll
      for (int d = 0; d < kDims; ++d)
        if (lane + 32 * d < D) attn[h * D + lane + 32 * d] = static_cast<XT>(acc[d] / total);
    }
    __syncwarp();  // scores[warp] and rows[warp] are written again by this warp's next task
  }
  mlxrt_grid_sync<BAR_COUNT>(barrier, GEN_WORD, block_stamp + 2);
  stamp(2);

  // 3. o_proj and the residual: h = x + round(attn @ wo.T).
  if constexpr (kQ8) mlxrt_q8_stage(attn, NQ, q8_words, q8_ds);
  mlxrt_qmv_tasks<1, R, R, BITS, GS, DEPTH, STREAM>(mlxrt_layer_x<kQ8>(attn, q8_words, q8_ds), true, COLS_O, gw, G,
                                                   tasks_o, lane, rows_of(kW_wo), residual_into(hres, x));
  mlxrt_grid_sync<BAR_COUNT>(barrier, GEN_WORD, block_stamp + 3);
  stamp(3);

  // 4. RMSNorm(h) staged; gate and up rows, SwiGLU (rms_norm_swiglu's roundings).
  mlxrt_stage_rms_norm<1>(hres, mlxrt_weight<XT>(wt, kW_nw2), __int_as_float(EPS2_BITS), K, xs, red);
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < K; i += blockDim.x) xn2[i] = xs[i];
  {
    // R rows of gate and the same of up, loaded together.
    auto task = [&](int t) {
      mlxrt_rows_task<WT, ST, 2 * R> k{mlxrt_weight<WT>(wt, kW_wg), mlxrt_weight<ST>(wt, kW_sg),
                                       mlxrt_weight<ST>(wt, kW_bg), mlxrt_weight<WT>(wt, kW_wu),
                                       mlxrt_weight<ST>(wt, kW_su), mlxrt_weight<ST>(wt, kW_bu)};
#pragma unroll
      for (int r = 0; r < 2 * R; ++r) k.n[r] = min(t * R + (r < R ? r : r - R), I - 1);
      return k;
    };
    if constexpr (kQ8) mlxrt_q8_stage(xs, K, q8_words, q8_ds);
    mlxrt_qmv_tasks<1, 2 * R, R, BITS, GS, DEPTH, STREAM>(mlxrt_layer_x<kQ8>(xs, q8_words, q8_ds), true, COLS, gw, G,
                                                         tasks_gu, lane, task,
                                                         [&](int t, float (&gu)[1][2 * R]) {
      const int row0 = t * R;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float g = static_cast<float>(static_cast<XT>(mlxrt_warp_sum(gu[0][r])));
        const float u = static_cast<float>(static_cast<XT>(mlxrt_warp_sum(gu[0][R + r])));
        if (lane == (r & 31) && row0 + r < I) {
          const float sig = static_cast<float>(static_cast<XT>(1.0f / (1.0f + expf(-g))));
          const float a = static_cast<float>(static_cast<XT>(g * sig));
          act[row0 + r] = static_cast<XT>(a * u);
        }
      }
    });
  }
  mlxrt_grid_sync<BAR_COUNT>(barrier, GEN_WORD, block_stamp + 4);
  stamp(4);

  // 5. down and the residual: the layer's output.
  if constexpr (kQ8) mlxrt_q8_stage(act, I, q8_words, q8_ds);
  mlxrt_qmv_tasks<1, R, R, BITS, GS, DEPTH, STREAM>(mlxrt_layer_x<kQ8>(act, q8_words, q8_ds), true, COLS_I, gw, G,
                                                   tasks_o, lane, rows_of(kW_wd), residual_into(y, hres));
  // The next launch's barrier: every block is past the last barrier, so the count is back to 0.
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    bar_next[0] = 0u;
    bar_next[GEN_WORD] = 0u;
  }
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(stamp_at + 5, mlxrt_globaltimer());
)";

std::string header() {
  return std::string(detail::kQmvDevice) + detail::kStageRmsNormDevice + detail::kNormRopeDevice + kLayerDevice;
}

// Whether the kernel's slot constants are kDecoderLayerWeightSlots's order (checked once, where the
// spec is made: a mismatch would read one weight for another).
void check_weight_slots() {
  const std::string text = kLayerDevice;
  for (size_t i = 0; i < kDecoderLayerWeightSlots.size(); ++i) {
    const std::string line = "kW_" + std::string(kDecoderLayerWeightSlots[i]) + " = " + std::to_string(i) + ",";
    if (text.find(line) == std::string::npos)
      throw std::logic_error("[decoder_layer] the kernel's weight slots differ from kDecoderLayerWeightSlots at " +
                             line);
  }
  if (text.find("kWeightSlots = " + std::to_string(kDecoderLayerWeightSlots.size()) + ";") == std::string::npos)
    throw std::logic_error("[decoder_layer] the kernel's count of weight slots differs from kDecoderLayerWeightSlots");
}

bool same_kind(std::initializer_list<const QmvMatrix*> mats) {
  const auto* first = *mats.begin();
  for (const auto* m : mats)
    if (m->bits != first->bits || m->group_size != first->group_size || m->scales.dtype() != first->scales.dtype() ||
        m->w.dtype() != first->w.dtype())
      return false;
  return true;
}

// Whether m is [n, k] of the kernel's kind for an x of type t (affine_qmv's conditions; no arrays
// made: this runs for every layer of every decoding step).
bool matrix_fits(const QmvMatrix& m, mx::Dtype t, int n, int k) {
  const auto is_float = [](mx::Dtype d) { return d == mx::bfloat16 || d == mx::float16 || d == mx::float32; };
  if (m.w.ndim() != 2 || m.w.shape(0) != n) return false;
  if (m.is_dense()) return m.w.dtype() == t && m.w.shape(1) == k;
  if ((m.bits != 4 && m.bits != 8) || (m.group_size != 32 && m.group_size != 64 && m.group_size != 128)) return false;
  if (m.w.dtype() != mx::uint32 || k % m.group_size != 0 || m.w.shape(1) != k / 32 * m.bits || k % 32 != 0)
    return false;
  const mx::Shape groups = {n, k / m.group_size};
  return is_float(m.scales.dtype()) && m.biases.dtype() == m.scales.dtype() && m.scales.shape() == groups &&
         m.biases.shape() == groups;
}

int cols_of(const QmvMatrix& m, int k) { return m.is_dense() ? k : k * m.bits / 32; }

// What the kernel's static shared memory may hold (48 KB, less a margin).
constexpr size_t kSharedLimit = 46 * 1024;

// The kernel's static shared memory at up to 8 warps: the staged row (K of the type), each warp's
// float rows (D) and scores (CHUNK), its rotated query and new key (D of the type), and with
// DecoderLayerGrid::q8 the int8 copy of the longest product input (`q8_values` bytes and a scale
// and a sum a 32 of them); the weights' table.
size_t shared_bytes(int K, int D, mx::Dtype t, int q8_values) {
  return kDecoderLayerWeightSlots.size() * 8 + static_cast<size_t>(K) * mx::size_of(t) +
         4 * (32 + 8 * (D + kDecoderLayerChunk)) +
         2 * 8 * static_cast<size_t>(D) * mx::size_of(t) + static_cast<size_t>(q8_values) / 32 * 40;
}

bool norm_of(const RmsNormIn& n, mx::Dtype t, int size) {
  return n.weight.dtype() == t && n.weight.ndim() == 1 && n.weight.shape(0) == size;
}

}  // namespace

const KernelSpec& decoder_layer_spec() {
  static const bool slots_checked = (check_weight_slots(), true);
  (void)slots_checked;
  static const KernelSpec spec{
      "mlxrt_decoder_layer",
      {"x", "tab", "kc", "vc", "off", "bar"},
      {"y", "bar_next", "scratch"},
      kSource,
      header(),
      true,
      0,
      true,
      true};
  return spec;
}

DecoderLayerUse decoder_layer_use() {
  // Read once: every layer of every forward asks, on every platform.
  static const DecoderLayerUse use = [] {
    switch (env_choice("MLXRT_CUDA_L3_LAYER", {0, 1}, -1)) {
      case 0: return DecoderLayerUse::off;
      case 1: return DecoderLayerUse::every_kind;
      default: return DecoderLayerUse::measured_kinds;
    }
  }();
  return use;
}

bool decoder_layer_wanted(const QmvMatrix& q) { return decoder_layer_wanted(q, decoder_layer_use()); }

bool decoder_layer_wanted(const QmvMatrix& q, DecoderLayerUse use) {
  switch (use) {
    case DecoderLayerUse::off: return false;
    case DecoderLayerUse::every_kind: return true;
    case DecoderLayerUse::measured_kinds: break;
  }
  return q.is_dense() || q.bits == 4;  // dense: by size (below)
}

bool decoder_layer_wanted(const DecoderLayerWeights& w) { return decoder_layer_wanted(w, decoder_layer_use()); }

bool decoder_layer_wanted(const DecoderLayerWeights& w, DecoderLayerUse use) {
  if (!decoder_layer_wanted(w.attn.q, use)) return false;
  if (use != DecoderLayerUse::measured_kinds || !w.attn.q.is_dense()) return true;
  size_t bytes = 0;
  for (const auto* m : {&w.attn.q, &w.attn.k, &w.attn.v, &w.attn.o, &w.mlp.gate, &w.mlp.up, &w.mlp.down})
    bytes += m->w.nbytes();
  return bytes <= kDecoderLayerDenseBytes;
}

DecoderLayerKnobs decoder_layer_knobs() {
  static const DecoderLayerKnobs knobs{env_choice("MLXRT_CUDA_L3_LAYER_BLOCKS_PER_SM", {1, 2, 3}, 0),
                                       env_choice("MLXRT_CUDA_L3_LAYER_DEPTH", {1, 2, 3, 4}, 0),
                                       env_choice("MLXRT_CUDA_L3_LAYER_ROWS", {1, 2, 4, 8}, 0),
                                       env_choice("MLXRT_CUDA_L3_LAYER_QKV_ROUNDS", {0, 1}, 1) == 1,
                                       env_choice("MLXRT_CUDA_L3_LAYER_STREAM", {0, 1}, 1) == 1,
                                       env_choice("MLXRT_CUDA_L3_LAYER_Q8", {0, 1}, 0) == 1,
                                       env_choice("MLXRT_CUDA_L3_LAYER_ATT_SPREAD", {0, 1, 2}, 0),
                                       env_choice("MLXRT_CUDA_L3_LAYER_ATT_PREFETCH", {0, 1, 2}, 0),
                                       env_choice("MLXRT_CUDA_L3_LAYER_ATT_PREFETCH_LINES", {0, 8, 16, 32, 64, 128}, 0),
                                       env_choice("MLXRT_CUDA_L3_LAYER_BARRIER", {0, 1}, 0) == 1};
  return knobs;
}

DecoderLayerGrid decoder_layer_grid(const DecoderLayerWeights& w) {
  return decoder_layer_grid(w, cuda_multiprocessor_count(), decoder_layer_knobs());
}

DecoderLayerGrid decoder_layer_grid(const DecoderLayerWeights& w, int multiprocessors, const DecoderLayerKnobs& knobs) {
  const bool dense = w.attn.q.is_dense();
  const int K = w.attn.o.w.shape(0);
  const int rows = knobs.rows > 0 ? knobs.rows : choose_tiling(K, {}, dense, K).rows_per_warp;
  // What mlxrt_layer_bench measured best (bench/RESULTS.md): dense rows want more loads in flight
  // per warp (depth 4, whose registers leave room for one block); 4-bit tasks of up to two rows at
  // depth 2 take at most 96 registers (make check-cuda-kernels), so two blocks fit and their warps
  // keep more loads in flight. Other kinds (8-bit, longer tasks) are not measured: one block.
  int depth = knobs.depth > 0 ? knobs.depth : dense ? 4 : 2;
  int per_sm = knobs.blocks_per_sm;
  if (per_sm == 0) per_sm = !dense && w.attn.q.bits == 4 && rows <= 2 && depth <= 2 ? 2 : 1;
  DecoderLayerGrid g;
  g.blocks = per_sm * multiprocessors;
  g.depth = depth;
  g.rows = knobs.rows;
  g.stream = knobs.stream;
  g.q8 = knobs.q8 && !dense && w.attn.q.bits == 4 && depth == 2 && knobs.stream;
  g.att_spread = knobs.att_spread;
  g.att_prefetch = knobs.att_prefetch;
  g.att_prefetch_lines = knobs.att_prefetch_lines;
  g.count_barrier = knobs.count_barrier;
  if (knobs.qkv_rounds && g.blocks > 0)
    g.qkv_rows = decoder_layer_qkv_rows(w.attn.q.w.shape(0), w.attn.k.w.shape(0), g.blocks * g.warps, rows);
  return g;
}

int decoder_layer_qkv_rows(int q_rows, int kv_rows, int warps, int rows) {
  const auto tasks = [&](int r) { return (q_rows + r - 1) / r + 2 * ((kv_rows + r - 1) / r); };
  const auto rounds = [&](int r) { return (tasks(r) + warps - 1) / std::max(warps, 1); };
  int best = rows;
  for (int r = rows + 1; r <= 2 * rows; ++r)
    if (rounds(r) < rounds(best)) best = r;
  return best;
}

bool decoder_layer_fits(const mx::array& x, const DecoderLayerWeights& w) {
  const auto t = x.dtype();
  if (t != mx::bfloat16 && t != mx::float16 && t != mx::float32) return false;
  if (x.ndim() != 3 || x.shape(0) != 1 || x.shape(1) != 1) return false;
  const auto& a = w.attn;
  const int K = x.shape(2), H = a.n_heads, HK = a.n_kv_heads;
  if (H <= 0 || HK <= 0 || H % HK != 0) return false;
  const int D = a.q.w.shape(0) / H;
  if (D * H != a.q.w.shape(0) || D % 2 != 0 || D > 256) return false;
  const int I = w.mlp.gate.w.shape(0);
  // The products: one kind for all seven, each of its shape.
  if (!same_kind({&a.q, &a.k, &a.v, &a.o, &w.mlp.gate, &w.mlp.up, &w.mlp.down})) return false;
  if (!matrix_fits(a.q, t, H * D, K) || !matrix_fits(a.k, t, HK * D, K) || !matrix_fits(a.v, t, HK * D, K) ||
      !matrix_fits(a.o, t, K, H * D) || !matrix_fits(w.mlp.gate, t, I, K) || !matrix_fits(w.mlp.up, t, I, K) ||
      !matrix_fits(w.mlp.down, t, K, I))
    return false;
  // The products' output type is x's (what the layer's nodes round to).
  if (!a.q.is_dense() && mx::promote_types(t, a.q.scales.dtype()) != t) return false;
  if (!norm_of(w.attn_norm, t, K) || !norm_of(w.mlp_norm, t, K)) return false;
  if (a.q_norm.has_value() != a.k_norm.has_value()) return false;
  if (a.q_norm && (!norm_of(*a.q_norm, t, D) || !norm_of(*a.k_norm, t, D))) return false;
  const auto& rope = a.rope;
  if (rope.dims <= 0 || rope.dims % 2 != 0 || rope.dims > D || rope.base.has_value() == rope.freqs.has_value())
    return false;
  if (rope.freqs && (rope.freqs->dtype() != mx::float32 || rope.freqs->size() != static_cast<size_t>(rope.dims / 2)))
    return false;
  return shared_bytes(K, D, t, 0) <= kSharedLimit;
}

DecoderLayerScratch decoder_layer_scratch(const mx::array& x, const DecoderLayerWeights& w, int capacity,
                                          const DecoderLayerGrid& grid) {
  const auto& a = w.attn;
  const size_t K = x.shape(2), H = a.n_heads, HK = a.n_kv_heads, D = a.q.w.shape(0) / H, I = w.mlp.gate.w.shape(0);
  const size_t t = mx::size_of(x.dtype());
  const size_t chunks = std::max<size_t>((capacity + kDecoderLayerChunk - 1) / kDecoderLayerChunk,
                                         static_cast<size_t>(grid.blocks * grid.warps) / H);
  DecoderLayerScratch s;
  size_t at = 0;
  // Each region from a 256-byte boundary, as MLX aligns its buffers.
  const auto take = [&at](size_t bytes) {
    const size_t start = at;
    at = (start + bytes + 255) / 256 * 256;
    return start;
  };
  s.stamps = take(kDecoderLayerStamps * sizeof(uint64_t));
  static_assert(kDecoderLayerBlockStamps == 5, "the kernel's source strides each block's stamps by 5");
  s.block_stamps = take(static_cast<size_t>(std::max(grid.blocks, 0)) * kDecoderLayerBlockStamps * sizeof(uint64_t));
  s.done = take(std::max<size_t>(H, 16) * sizeof(uint32_t));
  s.xn1 = take(K * t);
  s.qkv = take((H + 2 * HK) * D * t);
  s.qr = take(H * D * t);
  s.attn = take(H * D * t);
  s.hres = take(K * t);
  s.xn2 = take(K * t);
  s.act = take(I * t);
  s.part_floats = H * chunks * (D + 2);
  s.part = take(s.part_floats * sizeof(float));
  s.bytes = at;
  return s;
}

mx::array decoder_layer_scratch_view(const mx::array& scratch, size_t offset, size_t count, mx::Dtype type) {
  const int start = static_cast<int>(offset), stop = static_cast<int>(offset + count * mx::size_of(type));
  return mx::view(mx::slice(scratch, {start}, {stop}), type);
}

namespace {

// w's arrays in kDecoderLayerWeightSlots's order, by address (nullptr for an empty slot): no copies,
// for the check a decoding step makes.
std::array<const mx::array*, kDecoderLayerWeightSlots.size()> weight_slots(const DecoderLayerWeights& w) {
  const auto& a = w.attn;
  const auto& m = w.mlp;
  return {&w.attn_norm.weight, &a.q.w, &a.q.scales, &a.q.biases, &a.k.w, &a.k.scales, &a.k.biases, &a.v.w,
          &a.v.scales, &a.v.biases, a.q_norm ? &a.q_norm->weight : nullptr, a.k_norm ? &a.k_norm->weight : nullptr,
          a.rope.freqs ? &*a.rope.freqs : nullptr, &a.o.w, &a.o.scales, &a.o.biases, &w.mlp_norm.weight, &m.gate.w,
          &m.gate.scales, &m.gate.biases, &m.up.w, &m.up.scales, &m.up.biases, &m.down.w, &m.down.scales,
          &m.down.biases};
}

}  // namespace

std::vector<std::optional<mx::array>> decoder_layer_weight_arrays(const DecoderLayerWeights& w) {
  std::vector<std::optional<mx::array>> arrays;
  for (const auto* a : weight_slots(w)) arrays.push_back(a ? std::optional<mx::array>(*a) : std::nullopt);
  return arrays;
}

uint64_t decoder_layer_address(const mx::array& a) {
  if (!cuda_gpu_is_default()) return reinterpret_cast<uint64_t>(a.data<void>());
  // MLX 0.32's CUDA buffer (mlx/backend/cuda/allocator.h's CudaBuffer) begins with the device
  // address, as its gpu_ptr reads it; that header needs CUDA's, which a CPU build lacks.
  const auto* data = static_cast<void* const*>(a.buffer().ptr());
  return reinterpret_cast<uint64_t>(static_cast<const char*>(*data) + a.offset());
}

namespace {

// The arrays' addresses, each evaluated and row-contiguous first (as MLX would have copied an input
// that is not: the kernel reads every matrix in row order).
std::vector<uint64_t> weight_addresses(const std::vector<std::optional<mx::array>>& arrays) {
  std::vector<mx::array> present;
  for (const auto& a : arrays)
    if (a) present.push_back(*a);
  mx::eval(present);
  std::vector<uint64_t> addresses;
  addresses.reserve(arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (!arrays[i]) {
      addresses.push_back(0);
      continue;
    }
    if (!arrays[i]->flags().row_contiguous)
      throw std::invalid_argument(std::string("[decoder_layer] the layer's ") + kDecoderLayerWeightSlots[i] +
                                  " is not row-contiguous");
    addresses.push_back(decoder_layer_address(*arrays[i]));
  }
  return addresses;
}

mx::array table_of(const std::vector<uint64_t>& addresses) {
  mx::array host(addresses.begin(), {static_cast<int>(addresses.size())}, mx::uint64);
  if (!cuda_gpu_is_default()) return host;
  // A copy made by a node lies in device memory (the host array is in unified memory).
  auto table = mx::bitwise_or(host, mx::array(uint64_t{0}, mx::uint64));
  mx::eval(table);
  return table;
}

}  // namespace

mx::array decoder_layer_weight_table(const DecoderLayerWeights& w) {
  return table_of(weight_addresses(decoder_layer_weight_arrays(w)));
}

mx::array DecoderLayerWeightTable::get(const DecoderLayerWeights& w) const {
  std::lock_guard lock(mutex_);
  if (table_) {
    const auto slots = weight_slots(w);
    bool same = addresses_.size() == slots.size();
    for (size_t i = 0; i < slots.size() && same; ++i)
      same = (slots[i] ? decoder_layer_address(*slots[i]) : 0) == addresses_[i];
    if (same) return *table_;
  }
  addresses_ = weight_addresses(decoder_layer_weight_arrays(w));
  table_ = table_of(addresses_);
  return *table_;
}

std::vector<mx::array> decoder_layer_inputs(const mx::array& x, const mx::array& table, const mx::array& keys,
                                            const mx::array& values, const mx::array& offset, const mx::array& bar) {
  return {x, table, keys, values, offset, bar};
}

std::optional<KernelLaunch> decoder_layer_launch(const mx::array& x, const DecoderLayerWeights& w,
                                                 const mx::array& keys, const mx::array& values,
                                                 const mx::array& offset, const mx::array& bar,
                                                 const DecoderLayerGrid& grid) {
  if (!decoder_layer_fits(x, w)) return std::nullopt;
  return decoder_layer_launch(x, w, decoder_layer_weight_table(w), keys, values, offset, bar, grid);
}

std::optional<KernelLaunch> decoder_layer_launch(const mx::array& x, const DecoderLayerWeights& w,
                                                 const mx::array& table, const mx::array& keys,
                                                 const mx::array& values, const mx::array& offset,
                                                 const mx::array& bar, const DecoderLayerGrid& grid) {
  const int blocks = grid.blocks, warps = grid.warps, depth = grid.depth;
  const bool rows_ok = (grid.rows == 0 || grid.rows == 1 || grid.rows == 2 || grid.rows == 4 || grid.rows == 8) &&
                       grid.qkv_rows >= 0 && grid.qkv_rows <= 16;
  if (!decoder_layer_fits(x, w) || warps < 1 || warps > 8 || blocks < 1 || depth < 1 || depth > 4 || !rows_ok ||
      grid.att_spread < 0 || grid.att_spread > 2 || grid.att_prefetch < 0 || grid.att_prefetch > 2 ||
      grid.att_prefetch_lines < 0 || grid.att_prefetch_lines > 4096)
    return std::nullopt;
  const auto t = x.dtype();
  const auto& a = w.attn;
  const int K = x.shape(2), H = a.n_heads, HK = a.n_kv_heads, D = a.q.w.shape(0) / H, I = w.mlp.gate.w.shape(0);
  if (keys.ndim() != 4 || keys.shape(0) != 1 || keys.shape(1) != HK || keys.shape(3) != D || keys.dtype() != t)
    return std::nullopt;
  if (values.shape() != keys.shape() || values.dtype() != t || keys.shape(2) < 1) return std::nullopt;
  if (offset.dtype() != mx::int32 || offset.size() != 1 || bar.dtype() != mx::uint32 ||
      bar.size() != kDecoderLayerBarrierWords || table.dtype() != mx::uint64 ||
      table.size() != kDecoderLayerWeightSlots.size())
    return std::nullopt;
  const int S = keys.shape(2);
  // int8 x where its copy fits beside the rest (and the stream's 4-bit steps take it).
  const int q8_values = std::max({K, H * D, I});
  const bool q8 = grid.q8 && !a.q.is_dense() && a.q.bits == 4 && depth == 2 && grid.stream &&
                  shared_bytes(K, D, t, q8_values) <= kSharedLimit;
  const auto tiling = choose_tiling(K, {}, a.q.is_dense(), K);
  const int rows = grid.rows > 0 ? grid.rows : tiling.rows_per_warp;
  const int qkv_rows = grid.qkv_rows > 0 ? grid.qkv_rows : rows;
  const auto scratch = decoder_layer_scratch(x, w, S, grid);
  const float log2_base = a.rope.base ? std::log2(*a.rope.base) : 0.0f;
  const int threads = 32 * warps;
  const auto& m = w.mlp;
  return KernelLaunch{
      &decoder_layer_spec(),
      decoder_layer_inputs(x, table, keys, values, offset, bar),
      {x.shape(), {kDecoderLayerBarrierWords}, {static_cast<int>(scratch.bytes)}},
      {t, mx::uint32, mx::uint8},
      {blocks * threads, 1, 1},
      {threads, 1, 1},
      {{"XT", t}, {"WT", a.q.w.dtype()}, {"ST", a.q.scales.dtype()}, {"R", rows}, {"RQ", qkv_rows},
       {"BITS", a.q.bits}, {"GS", a.q.group_size}, {"K", K}, {"COLS", cols_of(a.q, K)},
       {"COLS_O", cols_of(a.o, H * D)}, {"I", I}, {"COLS_I", cols_of(m.down, I)}, {"H", H}, {"HK", HK}, {"D", D},
       {"ROT", a.rope.dims}, {"TRAD", a.rope.traditional}, {"FREQS", a.rope.freqs.has_value()},
       {"NORM", a.q_norm.has_value()}, {"NW", warps}, {"DEPTH", depth}, {"STREAM", grid.stream}, {"Q8X", q8},
       // (query heads in groups the block's warps do not divide: the plain spread, the kernel's own
       // fallback, without compiling it twice)
       {"ATT_SPREAD", grid.att_spread == 2 && warps % (H / HK) != 0 ? 1 : grid.att_spread},
       {"ATT_PF", grid.att_prefetch},
       {"ATT_PF_LINES", grid.att_prefetch ? grid.att_prefetch_lines : 0}, {"BAR_COUNT", grid.count_barrier},
       {"CHUNK", kDecoderLayerChunk},
       {"GEN_WORD", kDecoderLayerGenerationWord},
       {"EPS1_BITS", std::bit_cast<int>(w.attn_norm.eps)}, {"EPS2_BITS", std::bit_cast<int>(w.mlp_norm.eps)},
       {"EPS_Q_BITS", a.q_norm ? std::bit_cast<int>(a.q_norm->eps) : 0},
       {"EPS_K_BITS", a.k_norm ? std::bit_cast<int>(a.k_norm->eps) : 0},
       {"LOG2_BASE_BITS", std::bit_cast<int>(log2_base)}, {"SCALE_BITS", std::bit_cast<int>(a.rope.scale)},
       {"ATT_SCALE_BITS", std::bit_cast<int>(a.scale)}, {"OFF_STAMPS", static_cast<int>(scratch.stamps)},
       {"OFF_BLOCK_STAMPS", static_cast<int>(scratch.block_stamps)},
       {"OFF_DONE", static_cast<int>(scratch.done)}, {"OFF_XN1", static_cast<int>(scratch.xn1)},
       {"OFF_QKV", static_cast<int>(scratch.qkv)}, {"OFF_QR", static_cast<int>(scratch.qr)},
       {"OFF_ATTN", static_cast<int>(scratch.attn)}, {"OFF_HRES", static_cast<int>(scratch.hres)},
       {"OFF_XN2", static_cast<int>(scratch.xn2)}, {"OFF_ACT", static_cast<int>(scratch.act)},
       {"OFF_PART", static_cast<int>(scratch.part)}}};
}

}  // namespace mlxrt::kernels::cuda
