// The distributed group of a run, through mlx::core::distributed (mlx 0.32.4): the same init that
// mlx-lm's `mx.distributed.init()` makes, with the backend chosen the same way.
#include "mlxrt/dist/group.h"

#include <array>
#include <cstdlib>
#include <utility>

#include "mlxrt/util/errors.h"

namespace mlxrt::dist {

namespace {

struct Named {
  Backend backend;
  const char* name;
  const char* environment;  // what the backend reads, for an error that says what is missing
};

constexpr std::array<Named, 5> kBackends{{
    {Backend::any, "any", "one of the backends' launch environments"},
    {Backend::ring, "ring", "MLX_RANK and MLX_HOSTFILE (a JSON list of each rank's \"ip:port\" addresses)"},
    {Backend::mpi, "mpi", "an MPI launch (mpirun) and libmpi"},
    {Backend::nccl, "nccl", "MLX_RANK, MLX_WORLD_SIZE, NCCL_HOST_IP and NCCL_PORT, and a CUDA build of MLX"},
    {Backend::jaccl, "jaccl", "MLX_RANK, MLX_IBV_DEVICES and MLX_JACCL_COORDINATOR"},
}};

}  // namespace

Backend parse_backend(const std::string& name, const std::string& flag) {
  for (const auto& b : kBackends)
    if (name == b.name) return b.backend;
  throw UsageError(flag + " '" + name + "' is not a distributed backend (choose from: any, ring, mpi, nccl, jaccl)");
}

const char* backend_name(Backend backend) {
  for (const auto& b : kBackends)
    if (b.backend == backend) return b.name;
  return "any";
}

template <typename Join>
Group Group::joined(Join join, bool ring) {
  const auto before = connected_stream_sockets();
  Group group(join());
  if (group.distributed()) {
    auto peers = opened_between(before, connected_stream_sockets());
    if (ring) group.ring_peers_ = peers;
    group.watch_ = std::make_shared<PeerWatch>(std::move(peers));
  }
  return group;
}

namespace {

/** Whether `mx::distributed::init(false, "any")` takes the ring backend here: it tries NCCL first
 * on a CUDA build (which needs NCCL_HOST_IP and NCCL_PORT), then the ring (MLX_HOSTFILE). Unsure
 * cases say no. */
bool any_means_ring() {
  const bool nccl = mx::distributed::is_available("nccl") && std::getenv("NCCL_HOST_IP") && std::getenv("NCCL_PORT");
  return !nccl && std::getenv("MLX_HOSTFILE") && mx::distributed::is_available("ring");
}

}  // namespace

Group Group::init(Backend backend) {
  if (backend == Backend::any) return joined([] { return mx::distributed::init(false, "any"); }, any_means_ring());
  const auto& named = kBackends[static_cast<size_t>(backend)];
  if (!mx::distributed::is_available(named.name))
    throw UsageError(std::string("--backend ") + named.name + ": this build of MLX has no " + named.name + " backend");
  try {
    return joined([&] { return mx::distributed::init(true, named.name); }, backend == Backend::ring);
  } catch (const std::exception& e) {
    throw UsageError(std::string("--backend ") + named.name + ": could not join the distributed run (" + e.what() +
                     "); the " + named.name + " backend reads " + named.environment +
                     ", as mlx.launch or `mlxrt launch` sets them");
  }
}

}  // namespace mlxrt::dist
