#pragma once
/** A server run by several processes (mlx.launch or `mlxrt launch`): rank 0, the leader, serves
 * HTTP and decides everything that depends on the world outside the model — which request runs
 * next, whether a request stops (client gone, deadline), when a batch's time budget ends, which
 * prompt-cache entry is evicted — and every rank takes the leader's decision. So every rank makes
 * the same model calls in the same order, which the sharded model needs: each call is a
 * collective. mlx_lm.server shares its requests the same way (ResponseGenerator._share_object, an
 * all_sum of the pickled request); it shares no stop decision and refuses to cancel a request
 * when distributed, where here a request stops on every rank at the same step.
 *
 * Only the generation thread uses a Lockstep, in the same sequence of calls on every rank. */
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <mlx/distributed/distributed.h>

#include "mlxrt/dist/peer_watch.h"
#include "mlxrt/server/job.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::server {

namespace mx = mlx::core;

/** The ranks no longer make the same calls: nothing they compute can be trusted, and the server
 * stops rather than answer (never caught as one request's failure). */
class LockstepError : public Error {
 public:
  using Error::Error;
};

class Lockstep {
 public:
  /** `ring_peers`: the ring backend's connections (dist::Group::ring_peers), for await_leader. */
  explicit Lockstep(mx::distributed::Group group, std::vector<dist::OpenSocket> ring_peers = {})
      : group_(std::move(group)), ring_peers_(std::move(ring_peers)) {}

  bool leader() const { return group_.rank() == 0; }
  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }

  /** The leader's `local` on every rank. */
  bool agree(bool local);
  /** The leader's bytes on every rank (nullopt when the leader has none). */
  std::optional<std::string> share(const std::optional<std::string>& local);
  /** The leader's list on every rank. */
  std::vector<int32_t> share(const std::vector<int32_t>& local);
  /** mlx_lm.server's seed of a distributed run: every rank's PRNG key summed, viewed as one
   * uint64 (`mx.distributed.all_sum(mx.random.state[0]).view(mx.uint64).item()`). */
  uint64_t summed_seed(const mx::array& key);
  /** On a follower, before an exchange the leader may start much later (it looks at its queue
   * every tenth of a second while idle): sleeps until the leader's bytes arrive on the ring's
   * connections (dist::wait_for_peer_data), a second at most, so that an idle follower does not
   * spend the wait in the ring backend's polling, a core busy. Returns at once on the leader and
   * where the backend is not the ring. */
  void await_leader() const;

 private:
  /** The leader's `value` on every rank, checking that every rank is at the same exchange. */
  int32_t exchange(int32_t value);

  mx::distributed::Group group_;
  std::vector<dist::OpenSocket> ring_peers_;
  uint64_t exchanges_ = 0;
};

/** What a follower needs of a job to run it as the leader does: the request's generation
 * parameters and the prompt's tokens (not its messages: the prompt was built on the leader). */
std::string job_to_wire(const Job& job);
/** A follower's copy of the job `job_to_wire` described (no deadline, no client: whether it stops
 * is the leader's decision). */
std::shared_ptr<Job> job_from_wire(const std::string& wire);

}  // namespace mlxrt::server
