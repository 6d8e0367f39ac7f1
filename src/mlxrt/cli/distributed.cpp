// The distributed side of the CLI: flags, joining the run, and rank 0 as the only one that prints.
#include "mlxrt/cli/distributed.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>

#include <mlx/distributed/ops.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/cache/kv_cache.h"
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

namespace {

namespace mx = mlx::core;

/** Every rank's `x` (the same shape and dtype on all of them), in rank order. */
std::vector<mx::array> gather_parts(const mx::array& x, const mx::distributed::Group& group) {
  auto all = mx::distributed::all_gather(mx::expand_dims(x, 0), group);  // [size, ...x]
  mx::eval(all);
  std::vector<mx::array> parts;
  for (auto& part : mx::split(all, group.size(), 0)) parts.push_back(mx::squeeze(part, 0));
  mx::eval(parts);
  return parts;
}

const cache::KVCache& plain_layer(const cache::Cache& c) {
  const auto* kv = dynamic_cast<const cache::KVCache*>(&c);
  if (!kv)
    throw UnsupportedError("a distributed prompt cache is gathered from KVCache layers only (no --max-kv-size, "
                           "--kv-bits or recurrent layers)");
  return *kv;
}

std::unique_ptr<cache::Cache> kv_layer(std::optional<mx::array> keys, std::optional<mx::array> values, int offset) {
  auto out = std::make_unique<cache::KVCache>();
  if (keys) out->set_state(std::move(keys), std::move(values), offset);
  return out;
}

/** Tensor parallel: rank r holds heads [r * H/size, (r + 1) * H/size) of every layer's [B, H, T, D]. */
cache::CacheList gather_heads(const cache::CacheList& local, const mx::distributed::Group& group) {
  cache::CacheList out;
  for (const auto& layer : local) {
    const auto& kv = plain_layer(*layer);
    auto b = kv.buffers();
    if (!b) {
      out.push_back(kv_layer(std::nullopt, std::nullopt, 0));
      continue;
    }
    out.push_back(kv_layer(mx::concatenate(gather_parts(b->keys, group), 1),
                           mx::concatenate(gather_parts(b->values, group), 1), kv.offset()));
  }
  return out;
}

/** Pipeline: each layer comes from the rank that ran it; the others send zeros of its shape. */
cache::CacheList gather_layers(const cache::CacheList& local, const mx::distributed::Group& group) {
  const int rank = group.rank(), size = group.size();
  auto counts = gather_parts(mx::array(static_cast<int32_t>(local.size())), group);
  cache::CacheList out;
  for (int owner = size - 1; owner >= 0; --owner) {
    const int n = counts[owner].item<int32_t>();
    for (int j = 0; j < n; ++j) {
      std::optional<cache::PlainKV> mine;
      if (owner == rank) mine = plain_layer(*local[j]).buffers();
      // The owner's shape first (the same for every layer of these families, but not assumed).
      std::vector<int32_t> shape_of_mine(5, 0);
      if (mine) {
        for (int d = 0; d < 4; ++d) shape_of_mine[d] = mine->keys.shape(d);
        shape_of_mine[4] = plain_layer(*local[j]).offset();
      }
      auto shapes = gather_parts(mx::array(shape_of_mine.data(), {5}, mx::int32), group);
      const auto owner_shape = shapes[owner];
      const int offset = owner_shape.data<int32_t>()[4];
      if (owner_shape.data<int32_t>()[0] == 0) {
        out.push_back(kv_layer(std::nullopt, std::nullopt, 0));
        continue;
      }
      const mx::Shape shape(owner_shape.data<int32_t>(), owner_shape.data<int32_t>() + 4);
      // Every rank's own layers have the dtype of the owner's (one model).
      const auto dtype = plain_layer(*local[0]).buffers() ? plain_layer(*local[0]).buffers()->keys.dtype()
                                                          : mx::float32;
      auto keys = mine ? mine->keys : mx::zeros(shape, dtype);
      auto values = mine ? mine->values : mx::zeros(shape, dtype);
      out.push_back(kv_layer(gather_parts(keys, group)[owner], gather_parts(values, group)[owner], offset));
    }
  }
  return out;
}

}  // namespace

cache::CacheList gather_prompt_cache(const cache::CacheList& local, const model::Parallel& parallel) {
  for (const auto& layer : local) {
    plain_layer(*layer);
    mx::eval(layer->state());
  }
  return parallel.mode == model::Parallel::Mode::tensor ? gather_heads(local, parallel.group)
                                                        : gather_layers(local, parallel.group);
}

cache::CacheList shard_prompt_cache(cache::CacheList whole, const model::Parallel& parallel,
                                    const std::string& source) {
  const int rank = parallel.rank(), size = parallel.size();
  if (parallel.mode == model::Parallel::Mode::pipeline) {
    const auto range = model::pipeline_layers(static_cast<int>(whole.size()), rank, size, source);
    cache::CacheList mine;
    for (int i = range.start; i < range.end; ++i) mine.push_back(std::move(whole[i]));
    return mine;
  }
  cache::CacheList mine;
  for (size_t i = 0; i < whole.size(); ++i) {
    const auto& kv = plain_layer(*whole[i]);
    auto b = kv.buffers();
    if (!b) {
      mine.push_back(kv_layer(std::nullopt, std::nullopt, 0));
      continue;
    }
    const auto name = source + ": layer " + std::to_string(i) + "'s key/value heads";
    mine.push_back(kv_layer(model::nn::shard_tensor(b->keys, 1, rank, size, name),
                            model::nn::shard_tensor(b->values, 1, rank, size, name), kv.offset()));
  }
  return mine;
}

void refuse_distributed(const std::string& verb) {
  auto group = dist::Group::init(dist::Backend::any);
  if (group.distributed())
    throw UnsupportedError("'" + verb + "' has no distributed mode yet (" + std::to_string(group.size()) +
                           " processes were launched); distributed runs support: generate, logits, chat, benchmark, "
                           "perplexity, embed, cache_prompt, batch-generate");
}

}  // namespace mlxrt::cli
