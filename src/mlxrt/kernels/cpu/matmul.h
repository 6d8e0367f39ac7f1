#pragma once
/** The matmuls of a layer on the CPU (affine quantized, and bfloat16 x @ w.T), computed by our own
 * vectorised, multithreaded kernels where they give MLX's bytes exactly (L1), by MLX's own
 * kernels everywhere else.
 *
 * MLX's Linux CPU backend (x86-64 and aarch64) computes `quantized_matmul` one output at a time
 * with scalar float arithmetic (its SIMD path is for Accelerate only); ours runs the same
 * operations in the same order for 16, 8 or 4 outputs at once on AVX-512, AVX2 or NEON, over
 * several threads. Where
 * it cannot promise the same bytes (another platform or device, 3/5/6 bits, other quantization
 * modes, batched weights) it leaves MLX's node in place. */
#include <memory>
#include <optional>
#include <string>

#include <mlx/array.h>

namespace mlxrt::kernels::cpu {

namespace mx = mlx::core;

class CpuWorkers;

/** The CPU kernels of one loaded model: the instruction set found and the worker threads. */
class CpuKernels {
 public:
  /** Null where no kernel of ours runs (neither x86-64 nor aarch64 Linux, or an x86-64 CPU without
   * AVX2 + F16C, or without FMA for `l3`). `threads` <= 0: the machine's hardware threads.
   * `allow_avx512` false: the baseline instruction set even where a wider one runs (for tests):
   * AVX2 rather than AVX-512 / VNNI on x86-64, the L3 products without SDOT on aarch64. */
  static std::shared_ptr<CpuKernels> create(int threads, bool allow_avx512 = true, bool l3 = false);
  /** From the environment, for the loader: MLXRT_CPU_KERNELS=mlx keeps MLX's kernels (null),
   * MLXRT_CPU_THREADS=N sets the thread count. `l3`: also the L3 kernels (--fidelity l3), which
   * need ours (UsageError with MLXRT_CPU_KERNELS=mlx, UnsupportedError on a CPU without them). */
  static std::shared_ptr<CpuKernels> from_environment(bool l3 = false);

  ~CpuKernels();
  const char* instruction_set() const {
#if defined(MLXRT_CPU_NEON_KERNELS)
    return "neon";
#else
    return avx512_ ? "avx512" : "avx2";
#endif
  }
  bool avx512() const { return avx512_; }
  /** Whether the L3 kernels run (kernels/cpu/l3_matmul.h): measured, not bit-exact. */
  bool l3() const { return l3_; }
  /** The L3 kernels' instruction set: "avx512vnni" or "avx2"; "neondot" or "neon" on aarch64. */
  const char* l3_instruction_set() const {
#if defined(MLXRT_CPU_NEON_KERNELS)
    return vnni_ ? "neondot" : "neon";
#else
    return vnni_ ? "avx512vnni" : "avx2";
#endif
  }
  /** Whether the L3 products run on the wide integer dot product: AVX-512 VNNI, or SDOT on aarch64. */
  bool vnni() const { return vnni_; }
  /** Whether the CPU has fused multiply-add instructions (FMA on x86-64): the L1 logsumexp
   * (logsumexp.h) needs them for the ones MLX's exp asks for. */
  bool fma() const { return fma_; }
  /** Whether the L3 layer pieces run as one node each (kernels/cpu/l3_block.h); MLXRT_L3_BLOCKS=0
   * keeps one node per operation (the same bytes: for comparing the two). */
  bool l3_blocks() const { return l3_ && l3_blocks_; }
  CpuWorkers& workers() const { return *workers_; }
  int threads() const;

 private:
  CpuKernels(bool avx512, bool vnni, bool l3, int threads);
  bool avx512_;
  bool vnni_;
  bool fma_ = false;
  bool l3_;
  bool l3_blocks_ = true;
  std::unique_ptr<CpuWorkers> workers_;
};

/** Whether our L1 kernels run on this CPU without a model's CpuKernels (the single-threaded ones, as
 * argmax.h's): an x86-64 CPU with AVX2 and F16C (and FMA, for those that ask), unless
 * MLXRT_CPU_KERNELS=mlx (read at each call). */
bool own_kernels_here(bool fma = false);

/** mx::quantized_matmul(x, w, scales, biases, transpose = true, group_size, bits, mode): the same
 * node with our kernel in place of MLX's when `kernels` is set and the call is one it computes
 * exactly (CPU stream; affine mode; 2, 4 or 8 bits; a 2-D weight; float32, bfloat16 or float16). */
mx::array quantized_matmul(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x, const mx::array& w,
                           const mx::array& scales, const std::optional<mx::array>& biases, int group_size, int bits,
                           const std::string& mode);

/** mx::matmul(x, w.T), or mx::addmm(bias, x, w.T) with a bias: ours for bfloat16 x, w and bias
 * with a 2-D weight on the CPU (MLX computes these with scalar float sums, simd_gemm). `w_t`, when
 * given, is mx::transpose(w) made once by the layer: the same view, so the same product, but after
 * its first evaluation it is a leaf, not a node of every step's graph (MLX spends host time on
 * each node it dispatches, views included: a Qwen3-8B step has 252 such transposes). */
mx::array matmul_transposed(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x, const mx::array& w,
                            const std::optional<mx::array>& bias, const std::optional<mx::array>& w_t = std::nullopt);

/** mx::gather_qmm(x, w, scales, biases, lhs = none, rhs_indices, transpose = true, ...) (the
 * switch layers' expert matmul), with our kernel for each gathered block on the same terms. */
mx::array gather_qmm(const std::shared_ptr<const CpuKernels>& kernels, const mx::array& x, const mx::array& w,
                     const mx::array& scales, const std::optional<mx::array>& biases, const mx::array& rhs_indices,
                     int group_size, int bits, const std::string& mode, const std::optional<mx::array>& global_scale,
                     bool sorted_indices);

}  // namespace mlxrt::kernels::cpu
