#pragma once
/** The steps a distributed load takes around binding the weights, as mlx-lm's sharded_load. */
#include <filesystem>

#include "mlxrt/io/model_config.h"
#include "mlxrt/model/parallel.h"
#include "mlxrt/model/profile.h"

namespace mlxrt::model {

/** Refuses what mlx-lm's sharded_load refuses: a family without shard() for tensor parallel, or
 * without PipelineMixin for pipeline parallel (UnsupportedError naming the model_type and listing
 * the families that do), and adapters. */
void check_parallel_support(const Parallel& parallel, const io::ModelConfig& config, const ResolvedProfile& profile,
                            bool has_adapter);

/** Every rank must load the same model: a fingerprint of config.json and the weight files' names,
 * sizes and safetensors headers is gathered from all ranks and compared with rank 0's. ConfigError
 * naming the ranks that differ. Collective: every rank calls it once, before binding weights. */
void check_same_model_on_all_ranks(const Parallel& parallel, const io::ModelConfig& config);

/** mlx-lm's synchronisation after loading (an all_sum of 1 on the CPU), so no rank starts the first
 * collective of the forward while another is still reading weights. */
void barrier(const Parallel& parallel);

}  // namespace mlxrt::model
