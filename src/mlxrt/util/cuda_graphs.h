#pragma once
/** Whether MLX's CUDA backend records kernels into CUDA graphs (its default) or launches them one
 * by one, for a process that decodes batches of rows (the server, batch-generate).
 *
 * A batched decode step multiplies matrices of several rows, which MLX runs through cuBLASLt; with
 * graphs on, every such call is captured from a stream into a child graph, keyed and added to the
 * step's graph, and every command buffer's graph updated before it is launched. The step is bound
 * by that host work. Launched directly, the same kernels run on the same data, so the bytes are the
 * same. On an H200 (bench/RESULTS.md, 2026-12-04, eighth session) an 8-row decode step of a Qwen3-8B
 * bf16 model went from 13.8 to 10.1 ms, and one of Qwen3-0.6B from 11.8 to 8.9 ms; a one-row step
 * of 8B bf16 got faster too (9.9 -> 8.3 ms), one of 0.6B slower by 5%. One-row decoding of small or
 * quantized models through `generate` (matrix-vector kernels, no cuBLAS) is faster with graphs, so
 * the single-stream verbs keep MLX's default. */
namespace mlxrt {

/** Unless MLX_USE_CUDA_GRAPHS is set already, sets it to 0. MLX reads it once, when its CUDA
 * backend first encodes a kernel: call this before any GPU work. Returns whether MLX will use
 * CUDA graphs. */
bool prefer_direct_kernel_launches();

}  // namespace mlxrt
