#pragma once
/** A CUDA launch run on the CPU, for testing mlxrt's CUDA kernels where there is no GPU.
 *
 * Every thread of a block is a fiber (its own stack, switched with ucontext) on one system thread.
 * Blocks run one after another on the caller's thread, or, for a kernel whose blocks wait on each
 * other (a grid-wide barrier of atomics: it needs them resident together, as a GPU keeps a grid no
 * larger than its multiprocessors hold), each on a system thread of its own. A thread runs until it
 * reaches __syncthreads, a warp barrier (__syncwarp or either half of a shuffle), __nanosleep (a
 * spin-wait's pause: the other threads run) or its end; when no thread can run, the barriers whose
 * threads have all arrived open. That is CUDA's contract for well-formed kernels (no thread may
 * rely on another's progress except through these), so a kernel that computes the right values
 * here has its indices, bounds, shared-memory use and reductions right; what a CPU cannot show
 * (timing, the device's math functions, a weaker memory model than the CPU's) is the GPU tests'.
 *
 * Bugs that the device leaves undefined are errors here, named in the exception:
 *  - a barrier that can never open (__syncthreads reached by some threads of a block while others
 *    wait at a warp barrier, or a warp barrier whose lanes wait on different masks);
 *  - a warp-synchronous call (shuffle, __syncwarp) whose mask names a lane that has exited or is
 *    not waiting on the same mask;
 *  - a shuffle reading a lane that is not in its mask;
 *  - a spin-wait that never ends (30 s: e.g. a block that exits before a grid barrier);
 *  - __trap(), a kernel stopping itself. */
#include <cstdint>
#include <stdexcept>
#include <string>

#include "emu_abi.h"

namespace mlxrt::cuda_emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  unsigned count() const { return x * y * z; }
};

class SimtError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/** The kernel's entry: its parameters as cuLaunchKernel takes them (params[i] points at the i-th
 * parameter's value). */
using KernelEntry = void (*)(void** params);

/** Runs `grid` blocks of `block` threads of `entry` with `params`; `slot` gives the calling system
 * thread's table pointer of the program (device_shim.h's mlxrt_emu_slot). `resident`: all blocks at
 * once, each on its own system thread (at most 512 blocks). Throws SimtError for the kernel bugs
 * above and for a block of more than 1024 threads. */
void launch(KernelEntry entry, mlxrt_emu_slot_fn slot, Dim3 grid, Dim3 block, void** params, bool resident = false);

}  // namespace mlxrt::cuda_emu
