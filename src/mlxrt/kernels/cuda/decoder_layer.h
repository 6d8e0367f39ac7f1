#pragma once
/** A llama-style decoder layer's decoding step for one token as ONE CUDA kernel (L3: the default
 * at --fidelity l3 for the layers decoder_layer_wanted names, see below).
 *
 * Why: a decoding step on a GPU is bound by the host. MLX encodes every node of the step's graph
 * at 2-6 µs each (bench/RESULTS.md, eleventh session), and at L3 a Qwen3 layer is still about eight
 * compute nodes (the fused products, the q/k norms and RoPE, the cache's two slice updates, the
 * attention) plus views: an 8B step is ~5 ms of host time against ~1.5 ms of reads. One node a
 * layer is the lever the issue names ("the whole decode step ... or one persistent kernel").
 *
 * What the kernel does, in phases separated by a grid-wide barrier (its blocks are resident
 * together: the grid is at most the GPU's multiprocessors, and a barrier of atomics in `bar`, a
 * small buffer that persists between launches, lets them wait on each other):
 *  1. every block stages RMSNorm(x) in shared memory; the warps of the grid share the rows of q, k
 *     and v (affine 4/8-bit or dense, as fused_qmv's products);
 *  2. a warp per (query head, chunk of up to CHUNK keys, fewer while the grid has warps to spare):
 *     the head's q RMSNorm (Qwen3's) and RoPE, as qk_rope, and for the chunk of the new position
 *     its key's; the new key and value written into the cache buffers at `offset` in place (no
 *     slice update node) by one task a key head, and taken from the task's own copy by every task
 *     that needs them; scores, their maximum and sum, and the weighted values of the chunk,
 *     several keys' rows in flight at once (grouped-query heads share their key head); the warp
 *     that finishes a head's last chunk combines the head's chunks into the attention output (a
 *     count per head, no barrier);
 *  3. o_proj and the residual add;
 *  4. every block stages RMSNorm(h); gate and up rows together, SwiGLU;
 *  5. down and the residual add: the layer's output.
 * Intermediate results are rounded to the model's type where MLX's separate nodes round them (as
 * the fused kernels do); sums are float32. So it is L3: measured against L1 (`mlxrt fidelity`),
 * not byte-equal.
 *
 * The cache is written in place, so the caller must own its buffers alone (no clone or prompt
 * cache sharing them) and must have grown them to hold `offset` + 1 positions, and it advances the
 * cache's offset itself (cache::KVCache::begin_in_place_write does all three).
 *
 * Tested on the CPU's SIMT runtime against float64, phase by phase
 * (tests/cuda_kernels/decoder_layer_test.cpp, which also runs on a GPU), and compiled by NVRTC for
 * sm_90a in every combination the model launches (tools/cuda/nvrtc_check.py). On an H100
 * (bench/RESULTS.md, seventeenth session) its tests pass, an 8B 4-bit layer takes 103 µs (109 MB:
 * about 1.05 TB/s, still a third of the bandwidth), and Qwen3's decoding step runs at 243 tok/s
 * for 8B 4-bit (191 per-node L3, 158 mlx-lm) and 590-650 for 0.6B 4-bit (332 per-node, 266
 * mlx-lm), as near L1 as the per-node path. Hence the default for 4-bit layers at L3
 * (decoder_layer_use), and for small dense ones (kDecoderLayerDenseBytes). */
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include <mlx/array.h>


#include "mlxrt/kernels/cuda/fused_qmv.h"
#include "mlxrt/kernels/cuda/kernel_launch.h"
#include "mlxrt/kernels/cuda/qk_rope.h"

namespace mlxrt::kernels::cuda {

namespace mx = mlx::core;

/** The attention's part of a layer: q/k/v/o, the per-head q/k RMSNorms before RoPE (Qwen3's) or
 * none, the rotation, the softmax scale and the heads. */
struct DecoderLayerAttention {
  QmvMatrix q, k, v, o;
  std::optional<RmsNormIn> q_norm, k_norm;
  RopeIn rope;
  float scale = 1.0f;
  int n_heads = 0, n_kv_heads = 0;
};

/** The MLP's part: SwiGLU's gate, up and down. */
struct DecoderLayerMlp {
  QmvMatrix gate, up, down;
};

/** One decoder layer as the kernel takes it: the seven products of one kind (all affine with the
 * same bits, group size and scale type, or all dense of x's type), RMSNorms before the attention
 * and before the MLP. */
struct DecoderLayerWeights {
  RmsNormIn attn_norm;
  DecoderLayerAttention attn;
  RmsNormIn mlp_norm;
  DecoderLayerMlp mlp;
};

/** Which layers the model runs as this kernel in a decoding step at --fidelity l3 on a CUDA GPU
 * (MLXRT_CUDA_L3_LAYER, read once a process): unset, the kinds measured faster than the per-node
 * L3 (bench/RESULTS.md, seventeenth and nineteenth sessions): layers of 4-bit affine weights, and
 * dense layers of at most kDecoderLayerDenseBytes; 0 none; 1 every layer the kernel takes (8-bit
 * affine too, dense of any size). */
enum class DecoderLayerUse { off, measured_kinds, every_kind };
DecoderLayerUse decoder_layer_use();
/** The most bytes of dense weights (the seven products') a layer may have for the kernel to take
 * it by default. On an H100 (bench/RESULTS.md, nineteenth session), against the per-node L3: Qwen3
 * 0.6B bf16 (31 MB a layer) 2.9x and 1.7B (101 MB) 1.4x, where the per-node step is bound by the
 * host; 4B (203 MB) 0.97x and 8B (436 MB) 0.93x, bound by the reads, which cuBLAS's products make
 * faster than the kernel's. */
constexpr size_t kDecoderLayerDenseBytes = size_t{128} << 20;
/** Whether a layer whose q projection is `q` may be wanted (a cheap test before the layer's other
 * matrices are gathered): decoder_layer_wanted(w) decides. */
bool decoder_layer_wanted(const QmvMatrix& q);
bool decoder_layer_wanted(const QmvMatrix& q, DecoderLayerUse use);
/** Whether decoder_layer_use() (or `use`) wants the layer `w` as this kernel (whose seven products
 * are of one kind, or the kernel declines it). */
bool decoder_layer_wanted(const DecoderLayerWeights& w);
bool decoder_layer_wanted(const DecoderLayerWeights& w, DecoderLayerUse use);

/** How a launch spreads its work: `blocks` resident blocks of `warps` warps (at most 8), each warp
 * keeping `depth` steps of the products' loads in flight (1-4; 2 is one step ahead), with
 * `rows` rows of a matrix per product task (1, 2, 4 or 8; 0: affine_qmv's choice for the hidden
 * size). */
struct DecoderLayerGrid {
  int blocks = 0;
  int warps = 8;
  int depth = 2;
  int rows = 0;
  int qkv_rows = 0;  // rows a q/k/v task (phase 1); 0: as the other products' (`rows`)
  /** Quantized rows at depth 2: a warp's tasks of a phase as one stream of loads, the next task's
   * first step loaded before this one's last is summed (qmv_device.h's mlxrt_qmv_task_stream; the
   * same bytes). Else each task's loads start after the last task's sums. */
  bool stream = true;
  /** 4-bit rows with the stream: each product phase's x quantized to int8 in 32-value chunks (a
   * scale each, and the chunk's float32 sum for the groups' biases) and the products summed by
   * DP4A (qmv_device.h's mlxrt_q8_stage, mlxrt_q4_sum_step_q8): about a sixth of the instructions
   * of the float32 sums, and other arithmetic (L3, measured by `mlxrt fidelity`). Opt-in: on an
   * H200 the 8B 4-bit step is 12% faster, the 0.6B's level, and the mean KL against L1 three times
   * the float32 sums' (2.1e-4 on the 8B; bench/RESULTS.md, thirty-fourth session). */
  bool q8 = false;
  /** Phase 2's tasks (a query head and a chunk of keys each, fewer than the grid's warps): 0 every
   * warp of the first blocks; 1 one warp of each block in turn, over every multiprocessor; 2 as 1
   * but the query heads of one key head's chunk (which read the same keys and values) on warps of
   * one block, sharing its L1 and the prefetch, where they divide the block's warps (else as 1).
   * The same tasks, the same bytes. */
  int att_spread = 0;
  /** Phase 2: each task first asks for its chunk's cached keys and values, 0 not, 1 into L2, 2 into
   * its multiprocessor's L1 (PTX prefetch; the same loads follow, the same bytes). */
  int att_prefetch = 0;
  /** With att_prefetch: at most this many 128-byte lines of each of the chunk's keys and values
   * (its first ones), 0 for all of them. Long chunks ask for up to tens of kilobytes a warp, which
   * on Qwen3-8B's heads at position 4096 (four query heads, so four warps, to each chunk) made the
   * phase slower where short ones made it faster (bench/RESULTS.md, thirty-seventh session). */
  int att_prefetch_lines = 0;
  /** The grid barrier as one count that only grows, each block waiting for the next multiple of the
   * grid, instead of a count the last block resets and a generation it moves on (two writes and a
   * fence fewer between the last arrival and everyone's leaving; the same bytes). */
  bool count_barrier = false;
};

/** The grid for layers of `w` on this process's GPU. By default: 4-bit weights in tasks of up to
 * two rows take two blocks per multiprocessor (the driver's count) at depth 2; dense weights one
 * block at depth 4; other kinds one block at depth 2 (what mlxrt_layer_bench measured fastest on an
 * H100: bench/RESULTS.md). MLXRT_CUDA_L3_LAYER_BLOCKS_PER_SM=1|2|3, MLXRT_CUDA_L3_LAYER_DEPTH=1..4,
 * MLXRT_CUDA_L3_LAYER_ROWS=1|2|4|8, MLXRT_CUDA_L3_LAYER_QKV_ROUNDS=0 (q/k/v tasks of the other
 * products' rows instead of decoder_layer_qkv_rows's), MLXRT_CUDA_L3_LAYER_STREAM=0 (each task's
 * loads after the last task's sums), MLXRT_CUDA_L3_LAYER_Q8=1 (int8 x, DecoderLayerGrid::q8),
 * MLXRT_CUDA_L3_LAYER_ATT_SPREAD=0|1|2, MLXRT_CUDA_L3_LAYER_ATT_PREFETCH=0|1|2 and
 * MLXRT_CUDA_L3_LAYER_ATT_PREFETCH_LINES=0|8|16|32|64|128 (phase 2's tasks, DecoderLayerGrid::
 * att_spread, att_prefetch and att_prefetch_lines) and MLXRT_CUDA_L3_LAYER_BARRIER=0|1
 * (DecoderLayerGrid::count_barrier), read once a process, override them: tuning
 * knobs for bench/gpu/decoder_layer_bench.cpp's sweeps. A setting whose blocks cannot all be
 * resident (too many registers a thread for that many blocks) stops at the barrier's trap with an
 * error. blocks is 0 where the CUDA driver cannot say. */
DecoderLayerGrid decoder_layer_grid(const DecoderLayerWeights& w);
/** The tuning knobs above as set in the environment (read once; 0 where unset). */
struct DecoderLayerKnobs {
  int blocks_per_sm = 0;
  int depth = 0;
  int rows = 0;
  bool qkv_rounds = true;  // q/k/v tasks by decoder_layer_qkv_rows
  bool stream = true;      // DecoderLayerGrid::stream
  bool q8 = false;         // DecoderLayerGrid::q8
  int att_spread = 0;       // DecoderLayerGrid::att_spread
  int att_prefetch = 0;     // DecoderLayerGrid::att_prefetch
  int att_prefetch_lines = 0;  // DecoderLayerGrid::att_prefetch_lines
  bool count_barrier = false;  // DecoderLayerGrid::count_barrier
};
DecoderLayerKnobs decoder_layer_knobs();
/** decoder_layer_grid's choice for a GPU of `multiprocessors` under `knobs`. */
DecoderLayerGrid decoder_layer_grid(const DecoderLayerWeights& w, int multiprocessors, const DecoderLayerKnobs& knobs);

/** The rows of q, k and v a task of phase 1 takes, for tasks of `rows` rows elsewhere and `warps`
 * warps in the grid: from `rows` to twice that (gate's and up's pair of tasks already holds that
 * many rows' loads in registers), the fewest rounds of tasks over the warps, the fewest rows among
 * equals. Why: at Qwen3-8B's shapes, two-row tasks make 3072 of them for 2112 warps, so half the
 * warps run two rounds and the rest wait at the barrier (a quarter of the layer's warp time is
 * spent at barriers: bench/RESULTS.md, nineteenth session); three rows make one round of 2050.
 * Each row's sums are the same whatever the task's rows, so the bytes are too. The default since
 * an H100 timed it (8B 4-bit step 254.2 -> 261.8 tok/s, 0.6B 763 -> 778: bench/RESULTS.md,
 * twentieth session); MLXRT_CUDA_L3_LAYER_QKV_ROUNDS=0 turns it off. */
int decoder_layer_qkv_rows(int q_rows, int kv_rows, int warps, int rows);

/** Whether the kernel takes x [1, 1, hidden] with `w` (shapes, types, kinds of weights), for a
 * cache of `x`'s type and w's key heads and head size. */
bool decoder_layer_fits(const mx::array& x, const DecoderLayerWeights& w);

/** Keys per attention task (phase 2) at most: a short context's chunks are halved, down to 32
 * keys, while the grid's warps outnumber the tasks. */
constexpr int kDecoderLayerChunk = 128;

/** The kernel's phases (above), one grid barrier after each but the last. */
constexpr int kDecoderLayerPhases = 5;

/** The phases' stamps (in the scratch output, uint64 nanoseconds of the GPU's global timer): 0 the
 * start, 1-4 past each of the four barriers (block 0's view: every block has then finished the phase
 * before), 5 the last block's end. Slots 6-15 are unused. The launch's cost to write them is a few
 * stores; bench/gpu/decoder_layer_bench.cpp reads them. */
constexpr int kDecoderLayerStamps = 16;
/** Each block's stamps (the same clock), kDecoderLayerBlockStamps a block in block order: its start
 * and its arrival at each of the four barriers (its own end of the phase before). What they show:
 * how late blocks start after block 0, how unevenly a phase's work ends, and how long a barrier
 * takes once the last block is in. */
constexpr int kDecoderLayerBlockStamps = kDecoderLayerPhases;

/** The barrier's state: uint32 words, zeros, the arrivals in word 0 and the generation in word
 * kDecoderLayerGenerationWord (128 bytes on). Why 64 words and not the two it uses: MLX's CUDA
 * allocator puts buffers of up to 8 bytes in a pool of managed memory shared with the scalars the
 * host writes (each step's positions, the sampled tokens read back), and a page the host touches
 * while 132 blocks poll it migrates back and forth: with a two-word state a Qwen3-0.6B step took
 * 242 ms on the H200 (bench/RESULTS.md). A larger buffer is device memory. */
constexpr int kDecoderLayerBarrierWords = 64;
constexpr int kDecoderLayerGenerationWord = 32;

/** Where the phases' results lie in the launch's scratch output (uint8 [bytes]): byte offsets, each
 * on a 256-byte boundary; the stamps first (offset 0), then each block's, `part` last (its size
 * follows the cache's capacity). */
struct DecoderLayerScratch {
  size_t stamps = 0, block_stamps = 0, done = 0, xn1 = 0, qkv = 0, qr = 0, attn = 0, hres = 0, xn2 = 0, act = 0,
         part = 0;
  size_t part_floats = 0;  // the attention's partial sums: float32 values
  size_t bytes = 0;
};
/** The layout for x [1, 1, hidden] with `w`, a cache of `capacity` positions and `grid`. */
DecoderLayerScratch decoder_layer_scratch(const mx::array& x, const DecoderLayerWeights& w, int capacity,
                                          const DecoderLayerGrid& grid);
/** `count` values of `type` from byte `offset` of the scratch output (a view: for tests and tools). */
mx::array decoder_layer_scratch_view(const mx::array& scratch, size_t offset, size_t count, mx::Dtype type);

/** The layer's weights as the kernel takes them: their addresses in one uint64 array, in the order
 * of kDecoderLayerWeightSlots (a dense matrix's slots for scales and biases hold the matrix's own
 * address; a missing q/k norm or RoPE frequencies, 0).
 *
 * Why: MLX's host cost to dispatch a node grows with its inputs (each is copied into the node's
 * outputs' sibling lists, recorded for the CUDA graph's dependencies and kept alive until the GPU
 * is done), and the layer kernel had 31, 26 of them weights that never change: a Qwen3-0.6B
 * decoding step at L3 spent 27 µs of dispatch a layer node (bench/RESULTS.md, eighteenth
 * session), the step bound by the host. The table makes it six inputs: on an H200 the 0.6B 4-bit
 * step's host time fell by 0.15 ms and the 8B's by 0.55 ms (MLX also counts an input's bytes
 * toward cutting the step into CUDA graphs, and an 8B layer's weights are 110 MB).
 *
 * What it costs: MLX no longer sees the kernel read the weights. They are never written, so no
 * ordering is lost; the caller keeps them alive for as long as launches made with the table may
 * run (the model's layer owns both). The kernel reads each address where it uses the weight. */
inline constexpr std::array<const char*, 26> kDecoderLayerWeightSlots = {
    "nw1", "wq", "sq", "bq", "wk", "sk", "bk", "wv", "sv", "bv", "qnw", "knw", "freqs",
    "wo",  "so", "bo", "nw2", "wg", "sg", "bg", "wu", "su", "bu", "wd", "sd", "bd"};
/** w's arrays in slot order (nullopt for an empty slot). */
std::vector<std::optional<mx::array>> decoder_layer_weight_arrays(const DecoderLayerWeights& w);
/** The address the kernel reads `a` at (a CUDA buffer's device address on a CUDA GPU, else the
 * host address); `a` evaluated. */
uint64_t decoder_layer_address(const mx::array& a);
/** The table for `w` as a launch takes it: w's arrays evaluated, their addresses in a uint64 array
 * (on a CUDA GPU a copy in device memory, evaluated: MLX keeps arrays made from host data in
 * unified memory, whose pages move to the host when it writes a neighbour). Each call makes a new
 * one: tests and tools; the model keeps one (DecoderLayerWeightTable). */
mx::array decoder_layer_weight_table(const DecoderLayerWeights& w);

/** A layer's table, made at its first use and kept: made again only where one of the weights'
 * addresses has changed since (MLX's CUDA allocator moves a buffer to unified memory when the host
 * reads it), which each call checks (26 reads). Safe to share between threads. */
class DecoderLayerWeightTable {
 public:
  mx::array get(const DecoderLayerWeights& w) const;

 private:
  mutable std::mutex mutex_;
  mutable std::vector<uint64_t> addresses_;
  mutable std::optional<mx::array> table_;
};

/** The launch for x [1, 1, hidden] at position `offset` (int32 scalar) with the cache buffers
 * `keys` and `values` [1, n_kv_heads, capacity, head_dim] of x's type (capacity > offset), the
 * barrier's state `bar` (uint32 [kDecoderLayerBarrierWords], zeros) and `grid`. Output 0 is the
 * layer's output [1, 1, hidden]; output 1 the next launch's barrier state (zeros, written once
 * every block has passed the last barrier: the next launch on this cache takes it, which orders the
 * two); output 2 the scratch (decoder_layer_scratch's layout): the phases' stamps
 * (kDecoderLayerStamps) and each block's (kDecoderLayerBlockStamps), phase 2's count of finished
 * chunks per head, and each phase's results, for the tests: the staged RMSNorm(x) [hidden], the q,
 * k and v projections [(H + 2 HK) D], the rotated queries [H D], the attention's partial sums, its
 * output [H D], h [hidden], the staged RMSNorm(h) [hidden], SwiGLU's output [intermediate]. nullopt
 * where decoder_layer_fits does not hold or the cache or barrier do not match it. */
std::optional<KernelLaunch> decoder_layer_launch(const mx::array& x, const DecoderLayerWeights& w,
                                                 const mx::array& keys, const mx::array& values,
                                                 const mx::array& offset, const mx::array& bar,
                                                 const DecoderLayerGrid& grid);
/** The same with w's table (decoder_layer_weight_table's, or a DecoderLayerWeightTable's) given; the
 * overload above makes a new table each call, and so evaluates w's arrays (tests and tools). */
std::optional<KernelLaunch> decoder_layer_launch(const mx::array& x, const DecoderLayerWeights& w,
                                                 const mx::array& table, const mx::array& keys,
                                                 const mx::array& values, const mx::array& offset,
                                                 const mx::array& bar, const DecoderLayerGrid& grid);

/** A launch's inputs in the kernel's order (what decoder_layer_launch puts in KernelLaunch::inputs):
 * for a caller that keeps the launch's primitive and makes new nodes of it. */
std::vector<mx::array> decoder_layer_inputs(const mx::array& x, const mx::array& table, const mx::array& keys,
                                            const mx::array& values, const mx::array& offset, const mx::array& bar);

/** The kernel's text (tests and tools compile it without a GPU). */
const KernelSpec& decoder_layer_spec();

}  // namespace mlxrt::kernels::cuda
