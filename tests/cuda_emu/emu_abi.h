#pragma once
/* What a kernel program compiled for the CPU (device_shim.h) and the runtime that runs it (simt.h)
 * share: plain C, so that both sides agree on it whatever each is compiled with. The runtime fills
 * the indices of the thread it is about to resume before every switch (all threads of a launch run
 * on one system thread, one at a time), and the kernel reads them through threadIdx and friends. */
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct mlxrt_emu_dim3 {
  unsigned x, y, z;
};

/* How a shuffle picks the lane it reads (CUDA's __shfl_*_sync). */
enum mlxrt_emu_shfl_mode { MLXRT_EMU_SHFL_IDX = 0, MLXRT_EMU_SHFL_XOR = 1, MLXRT_EMU_SHFL_DOWN = 2, MLXRT_EMU_SHFL_UP = 3 };

struct mlxrt_emu_api {
  struct mlxrt_emu_dim3 thread_idx, block_idx, block_dim, grid_dim;
  /* __syncthreads, called from source line `site` (the runtime checks every thread waits at the same one). */
  void (*sync_threads)(unsigned site);
  void (*sync_warp)(unsigned mask);
  /* `value`'s bytes (at most 8) as the lane picked by mode and arg reads them, within groups of
   * `width` lanes. */
  uint64_t (*shuffle)(unsigned mask, uint64_t value, int arg, int mode, int width);
  /* __nanosleep: the thread lets the others of its block run (a spin-wait's pause). */
  void (*pause)(void);
  /* __trap: the kernel stops itself (an error of the launch). */
  void (*trap)(void);
};

/* The program's pointer to the calling system thread's table (each block's thread has its own). */
typedef struct mlxrt_emu_api** (*mlxrt_emu_slot_fn)(void);

#ifdef __cplusplus
}
#endif
