#pragma once
/** Starting the ranks of a distributed run on this machine, with the environment mlx.launch gives
 * each rank (MLX_RANK; for ring a hostfile of each rank's address in MLX_HOSTFILE; for nccl
 * MLX_WORLD_SIZE, NCCL_HOST_IP, NCCL_PORT and CUDA_VISIBLE_DEVICES), and watching them: when one
 * fails, the others are stopped. */
#include <string>
#include <vector>

#include "mlxrt/dist/group.h"

namespace mlxrt::dist {

struct LaunchOptions {
  int ranks = 1;
  Backend backend = Backend::ring;
  std::string program;             // the executable every rank runs
  std::vector<std::string> args;   // its arguments (argv[1...])
  double grace_seconds = 3.0;      // after a failure, how long the others get before SIGKILL
};

/** Runs the ranks to the end. Rank 0's stdout is this process's; the others' stdout is discarded
 * (each rank's stderr is kept). This process's stdin is copied to every rank, as mlx.launch does.
 * Returns 0 when every rank exits 0, else the first failing rank's exit status (128 + signal for a
 * rank killed by a signal), after stopping the others. */
int launch_local(const LaunchOptions& options);

}  // namespace mlxrt::dist
