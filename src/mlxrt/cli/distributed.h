#pragma once
/** The distributed flags of the verbs that run a model (mlx-lm's chat/server/benchmark take
 * --pipeline; the backend comes from the launch environment, or --backend here), and joining the
 * run they describe. */
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "mlxrt/cache/cache.h"
#include "mlxrt/dist/group.h"
#include "mlxrt/model/parallel.h"

namespace mlxrt::cli {

struct DistributedArgs {
  std::string backend = "any";
  bool pipeline = false;
};

/** Adds --backend and --pipeline to `cmd`. */
void add_distributed_flags(CLI::App* cmd, DistributedArgs& args);

/** While it lives, a rank other than 0 writes nothing on stdout (mlx.launch forwards every rank's
 * output; only rank 0 speaks). Errors still go to stderr. */
class QuietUnlessPrimary {
 public:
  explicit QuietUnlessPrimary(bool primary);
  ~QuietUnlessPrimary();
  QuietUnlessPrimary(const QuietUnlessPrimary&) = delete;
  QuietUnlessPrimary& operator=(const QuietUnlessPrimary&) = delete;

 private:
  int saved_stdout_ = -1;
};

/** This process's place in the run: the group (a group of one outside a launch), and the Parallel
 * that load_model shards by (none for one process). */
struct DistributedRun {
  dist::Group group;
  std::optional<model::Parallel> parallel;
  bool primary() const { return group.primary(); }
};

/** Joins the run `args` and the environment describe. Outside a run of several processes --pipeline
 * has no effect, as in mlx-lm. */
DistributedRun join_run(const DistributedArgs& args);

/** The whole model's prompt cache, gathered from every rank's part (a collective: every rank calls
 * it, and every rank gets the result). Tensor parallel: each layer's key/value heads joined in rank
 * order, the order shard() split them. Pipeline: each rank's layers in model order (the last rank
 * holds the first layers). The result is the cache one process would hold, and saves as it does.
 * KVCache and RotatingKVCache layers only (UnsupportedError otherwise). */
cache::CacheList gather_prompt_cache(const cache::CacheList& local, const model::Parallel& parallel);

/** A whole model's prompt cache (as a file holds it, whoever saved it) cut to this rank's part, the
 * inverse of gather_prompt_cache: tensor parallel keeps this rank's key/value heads of each layer, a
 * pipeline the layers this rank runs (`layers_here`: how many; a collective then, refusing a cache
 * of another layer count on every rank alike). KVCache and RotatingKVCache layers only
 * (UnsupportedError otherwise). */
cache::CacheList shard_prompt_cache(cache::CacheList whole, const model::Parallel& parallel, int layers_here,
                                    const std::string& source);

/** UnsupportedError naming `verb` when the launch environment describes several processes (a verb
 * with no distributed path). Every rank joins and refuses alike. */
void refuse_distributed(const std::string& verb);

}  // namespace mlxrt::cli
