#pragma once
/** Loading a model with streamed experts (--expert-memory; nn/expert_store.h). */
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>

#include "mlxrt/model/loader.h"
#include "mlxrt/model/nn/expert_store.h"

namespace mlxrt::model {

/** load_model, with the MoE layers' experts left in the weight files and streamed through an LRU
 * cache of `expert_memory_bytes` (stored in `experts`); unset: load_model itself. Before any weight
 * is read: UsageError naming --expert-memory when the model has no experts to stream or the budget
 * cannot hold one layer's top-k experts (the message gives the minimum). */
LoadedModel load_model(const std::filesystem::path& path, const LoadOptions& options,
                       std::optional<uint64_t> expert_memory_bytes, std::shared_ptr<nn::ExpertStore>& experts);

}  // namespace mlxrt::model
