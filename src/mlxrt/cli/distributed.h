#pragma once
/** The distributed flags of the verbs that run a model (mlx-lm's chat/server/benchmark take
 * --pipeline; the backend comes from the launch environment, or --backend here), and joining the
 * run they describe. */
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

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

/** UnsupportedError naming `verb` when the launch environment describes several processes (a verb
 * with no distributed path). Every rank joins and refuses alike. */
void refuse_distributed(const std::string& verb);

}  // namespace mlxrt::cli
