#pragma once
/** The processes of one distributed run, as MLX's launch environment describes them (mlx.launch, or
 * `mlxrt launch`): rank, world size and the backend that connects them. A Group is a value owned by
 * whoever runs the verb; nothing here is global beyond what MLX itself keeps. */
#include <memory>
#include <string>
#include <vector>

#include <mlx/distributed/distributed.h>

#include "mlxrt/dist/peer_watch.h"

namespace mlxrt::dist {

namespace mx = mlx::core;

/** MLX's communication backends, as `mx.distributed.init(backend=...)` names them. `any` takes the
 * first one whose launch environment is present (a single process when none is). */
enum class Backend { any, ring, mpi, nccl, jaccl };

/** "any", "ring", "mpi", "nccl", "jaccl" -> Backend; UsageError naming `flag` and listing them. */
Backend parse_backend(const std::string& name, const std::string& flag = "--backend");
const char* backend_name(Backend backend);

class Group {
 public:
  /** Joins the run the environment describes. With an explicit backend, a missing or unusable
   * launch environment is a UsageError naming what that backend reads; with `any` and no
   * environment, a group of one. */
  static Group init(Backend backend);
  int rank() const { return raw_.rank(); }
  int size() const { return raw_.size(); }
  /** Rank 0: the process that prints, writes outputs and serves. */
  bool primary() const { return rank() == 0; }
  bool distributed() const { return size() > 1; }
  const mx::distributed::Group& raw() const { return raw_; }
  /** The TCP connections the ring backend opened to this rank's peers, which carry every
   * collective's bytes (wait_for_peer_data); empty for a group of one and for the other backends
   * (NCCL, MPI, JACCL move their bytes by other means). */
  const std::vector<OpenSocket>& ring_peers() const { return ring_peers_; }

 private:
  /** Joins through `join` (MLX's init), and watches the peer connections it opened when the run
   * has several processes (PeerWatch). */
  template <typename Join>
  static Group joined(Join join, bool ring);
  explicit Group(mx::distributed::Group raw) : raw_(std::move(raw)) {}
  mx::distributed::Group raw_;
  std::vector<OpenSocket> ring_peers_;
  std::shared_ptr<PeerWatch> watch_;  // shared: a Group is a value, the watch lives as long as one copy
};

}  // namespace mlxrt::dist
