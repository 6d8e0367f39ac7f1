// `mlxrt launch -n N [--backend ring|nccl] -- VERB ARGS...`: runs N ranks of this same executable on
// this machine, each with the environment mlx.launch would give it, so that a distributed run needs
// no Python. Rank 0's output is the run's output; a rank that fails stops the others.
#include <unistd.h>

#include <climits>
#include <memory>
#include <string>
#include <vector>

#include "mlxrt/cli/verbs.h"
#include "mlxrt/dist/local_launch.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::cli {

namespace {

struct Args {
  int ranks = 2;
  std::string backend = "ring";
  std::vector<std::string> command;
};

std::string self_executable() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error("mlxrt launch: cannot find this executable's path");
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

void register_launch(CLI::App& app) {
  auto* cmd = app.add_subcommand("launch", "Run an mlxrt command as N local ranks of a distributed run "
                                           "(as mlx.launch does): mlxrt launch -n 2 -- generate --model DIR ...");
  auto a = std::make_shared<Args>();
  cmd->add_option("-n,--ranks", a->ranks, "Number of local processes")->capture_default_str();
  cmd->add_option("--backend", a->backend, "Distributed backend: ring (TCP over loopback) or nccl (one GPU per rank)")
      ->capture_default_str();
  cmd->add_option("command", a->command, "The mlxrt command each rank runs (after --)")->required();
  cmd->callback([a] {
    if (a->command.empty() || a->command.front() == "launch")
      throw UsageError("mlxrt launch: give the mlxrt command to run after --, e.g. -- generate --model DIR");
    dist::LaunchOptions o;
    o.ranks = a->ranks;
    o.backend = dist::parse_backend(a->backend);
    o.program = self_executable();
    o.args = a->command;
    // The verbs that run distributed take --backend: each rank joins with the backend it is given.
    const auto& verb = a->command.front();
    if (verb == "generate" || verb == "logits" || verb == "chat" || verb == "benchmark") o.args.insert(o.args.begin() + 1, {"--backend", a->backend});
    const int code = dist::launch_local(o);
    if (code != 0) throw ExitCode{code};
  });
}

}  // namespace mlxrt::cli
