// The distributed side of the CLI: flags, joining the run, and rank 0 as the only one that prints.
#include "mlxrt/cli/distributed.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <iostream>

#include <mlx/distributed/ops.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/cache/rotating_kv_cache.h"
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

/** What a layer's cache holds besides its key/value buffers: its kind and its positions. */
struct LayerMeta {
  enum Kind : int32_t { kv = 0, rotating = 1 } kind = kv;
  int32_t offset = 0, keep = 0, max_size = 0, idx = 0;
};

/** The buffers and meta of a KVCache or RotatingKVCache layer (UnsupportedError for any other). */
std::pair<std::optional<cache::PlainKV>, LayerMeta> layer_parts(const cache::Cache& c) {
  if (const auto* kv = dynamic_cast<const cache::KVCache*>(&c))
    return {kv->buffers(), LayerMeta{LayerMeta::kv, kv->offset()}};
  if (const auto* r = dynamic_cast<const cache::RotatingKVCache*>(&c))
    return {r->buffers(), LayerMeta{LayerMeta::rotating, r->offset(), r->keep(), r->max_size(), r->idx()}};
  throw UnsupportedError("a distributed prompt cache holds KVCache and RotatingKVCache layers only (no --kv-bits "
                         "or recurrent layers)");
}

std::unique_ptr<cache::Cache> make_layer(std::optional<mx::array> keys, std::optional<mx::array> values,
                                         const LayerMeta& m) {
  if (m.kind == LayerMeta::rotating) {
    auto out = std::make_unique<cache::RotatingKVCache>(m.max_size, m.keep);
    if (keys) out->set_state(std::move(keys), std::move(values), m.offset, m.keep, m.max_size, m.idx);
    return out;
  }
  auto out = std::make_unique<cache::KVCache>();
  if (keys) out->set_state(std::move(keys), std::move(values), m.offset);
  return out;
}

/** Each layer with its key/value buffers [B, H, T, D] replaced by f(buffer), the rest kept. */
cache::CacheList map_buffers(const cache::CacheList& layers,
                             const std::function<mx::array(const mx::array&, size_t)>& f) {
  cache::CacheList out;
  for (size_t i = 0; i < layers.size(); ++i) {
    auto [b, meta] = layer_parts(*layers[i]);
    if (!b) {
      out.push_back(make_layer(std::nullopt, std::nullopt, meta));
      continue;
    }
    auto keys = f(b->keys, i);
    out.push_back(make_layer(keys, f(b->values, i), meta));
  }
  return out;
}

/** Pipeline: each layer comes from the rank that ran it (its shape and meta first); the others
 * send zeros of its shape. */
cache::CacheList gather_layers(const cache::CacheList& local, const mx::distributed::Group& group) {
  const int rank = group.rank(), size = group.size();
  auto counts = gather_parts(mx::array(static_cast<int32_t>(local.size())), group);
  const auto dtype = local.empty() || !layer_parts(*local[0]).first ? mx::float32
                                                                     : layer_parts(*local[0]).first->keys.dtype();
  cache::CacheList out;
  for (int owner = size - 1; owner >= 0; --owner) {
    for (int j = 0; j < counts[owner].item<int32_t>(); ++j) {
      std::optional<cache::PlainKV> mine;
      std::vector<int32_t> header(9, 0);  // 4 dims of the buffers, then kind, offset, keep, max_size, idx
      if (owner == rank) {
        auto [b, m] = layer_parts(*local[j]);
        mine = b;
        for (int d = 0; d < 4 && b; ++d) header[d] = b->keys.shape(d);
        header[4] = m.kind;
        header[5] = m.offset;
        header[6] = m.keep;
        header[7] = m.max_size;
        header[8] = m.idx;
      }
      auto sent = gather_parts(mx::array(header.data(), {9}, mx::int32), group)[owner];
      const int32_t* h = sent.data<int32_t>();
      const LayerMeta meta{static_cast<LayerMeta::Kind>(h[4]), h[5], h[6], h[7], h[8]};
      if (h[0] == 0) {
        out.push_back(make_layer(std::nullopt, std::nullopt, meta));
        continue;
      }
      const mx::Shape shape(h, h + 4);
      auto keys = gather_parts(mine ? mine->keys : mx::zeros(shape, dtype), group)[owner];
      auto values = gather_parts(mine ? mine->values : mx::zeros(shape, dtype), group)[owner];
      out.push_back(make_layer(keys, values, meta));
    }
  }
  return out;
}

}  // namespace

cache::CacheList gather_prompt_cache(const cache::CacheList& local, const model::Parallel& parallel) {
  for (const auto& layer : local) {
    layer_parts(*layer);
    mx::eval(layer->state());
  }
  if (parallel.mode == model::Parallel::Mode::pipeline) return gather_layers(local, parallel.group);
  // Tensor parallel: rank r holds heads [r * H/size, (r + 1) * H/size) of every layer.
  return map_buffers(local, [&](const mx::array& x, size_t) {
    return mx::concatenate(gather_parts(x, parallel.group), 1);
  });
}

cache::CacheList shard_prompt_cache(cache::CacheList whole, const model::Parallel& parallel, int layers_here,
                                    const std::string& source) {
  const int rank = parallel.rank(), size = parallel.size();
  if (parallel.mode == model::Parallel::Mode::pipeline) {
    // Every rank checks the whole count (a collective), so that all of them refuse a file of another
    // model alike instead of some cutting it differently from their layers.
    int total = 0;
    for (const auto& n : gather_parts(mx::array(static_cast<int32_t>(layers_here)), parallel.group))
      total += n.item<int32_t>();
    if (static_cast<int>(whole.size()) != total)
      throw ConfigError(source + ": the cache has " + std::to_string(whole.size()) + " layers, the model " +
                        std::to_string(total) + " (was it saved from another model?)");
    const auto range = model::pipeline_layers(static_cast<int>(whole.size()), rank, size, source);
    cache::CacheList mine;
    for (int i = range.start; i < range.end; ++i) mine.push_back(std::move(whole[i]));
    return mine;
  }
  return map_buffers(whole, [&](const mx::array& x, size_t i) {
    return model::nn::shard_tensor(x, 1, rank, size, source + ": layer " + std::to_string(i) + "'s key/value heads");
  });
}

void refuse_distributed(const std::string& verb) {
  auto group = dist::Group::init(dist::Backend::any);
  if (group.distributed())
    throw UnsupportedError("'" + verb + "' has no distributed mode yet (" + std::to_string(group.size()) +
                           " processes were launched); distributed runs support: generate, logits, chat, benchmark, "
                           "perplexity, embed, cache_prompt, batch-generate");
}

}  // namespace mlxrt::cli
