// The distributed side of the CLI: flags, joining the run, and rank 0 as the only one that prints.
#include "mlxrt/cli/distributed.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>

#include "mlxrt/util/errors.h"

namespace mlxrt::cli {

void add_distributed_flags(CLI::App* cmd, DistributedArgs& args) {
  cmd->add_option("--backend", args.backend,
                  "Distributed backend when launched on several processes (mlx.launch or mlxrt launch): any, "
                  "ring, mpi, nccl, jaccl")
      ->capture_default_str();
  cmd->add_flag("--pipeline", args.pipeline, "Use pipelining instead of tensor parallelism");
}

QuietUnlessPrimary::QuietUnlessPrimary(bool primary) {
  if (primary) return;
  std::cout.flush();
  std::fflush(stdout);
  saved_stdout_ = ::dup(STDOUT_FILENO);
  const int null_fd = ::open("/dev/null", O_WRONLY);
  if (null_fd >= 0) {
    ::dup2(null_fd, STDOUT_FILENO);
    ::close(null_fd);
  }
}

QuietUnlessPrimary::~QuietUnlessPrimary() {
  if (saved_stdout_ < 0) return;
  std::cout.flush();
  std::fflush(stdout);
  ::dup2(saved_stdout_, STDOUT_FILENO);
  ::close(saved_stdout_);
}

DistributedRun join_run(const DistributedArgs& args) {
  auto group = dist::Group::init(dist::parse_backend(args.backend));
  // A peer that dies closes its sockets: the backend's next send must fail with an error this rank
  // reports ("connection to a peer was lost"), not kill it with SIGPIPE before it can say why.
  if (group.distributed()) std::signal(SIGPIPE, SIG_IGN);
  std::optional<model::Parallel> parallel;
  if (group.distributed())
    parallel = model::Parallel{args.pipeline ? model::Parallel::Mode::pipeline : model::Parallel::Mode::tensor,
                               group.raw()};
  return DistributedRun{group, parallel};
}

void refuse_distributed(const std::string& verb) {
  auto group = dist::Group::init(dist::Backend::any);
  if (group.distributed())
    throw UnsupportedError("'" + verb + "' has no distributed mode yet (" + std::to_string(group.size()) +
                           " processes were launched); distributed runs support: generate, logits, chat, benchmark");
}

}  // namespace mlxrt::cli
