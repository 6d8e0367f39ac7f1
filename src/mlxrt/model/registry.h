#pragma once
/** The one table of architectures: which model_types each graph runs, mlx-lm's remapping, and
 * the builder of each graph. */
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mlxrt/io/model_config.h"
#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/nn/weight_binder.h"
#include "mlxrt/model/profile.h"

namespace mlxrt::model {

struct GraphEntry {
  Graph graph;
  std::string name;                       // "qwen3", "llama"
  Capability capability;                  // the graph's own capability
  std::vector<std::string> model_types;   // model_types with a dedicated profile on this graph
  std::vector<std::string> generic_types; // model_types mlx-lm runs through this graph by remapping
  std::function<std::unique_ptr<CausalLM>(const io::ModelConfig&, WeightBinder&)> build;
  std::vector<Capability> features = {};  // what else the graph needs besides its own capability
};

const std::vector<GraphEntry>& graph_registry();
const GraphEntry& graph_entry(Graph graph);

/** mlx-lm's MODEL_REMAPPING (mlx_lm/utils.py): the model file mlx-lm would load for a type. */
std::string mlx_lm_remap(const std::string& model_type);

/** Whether mlx-lm's model file for `graph` defines shard() (tensor parallel) and whether its model
 * is a PipelineMixin (pipeline parallel), among the graphs whose sharding mlxrt ports. */
bool graph_shards(Graph graph);
bool graph_pipelines(Graph graph);
/** The names of the graphs graph_shards / graph_pipelines accept, for an error message. */
std::string sharded_graph_names(bool pipeline);

/** Whether `graph` can run a config of this model_type (as dedicated or generic). */
bool graph_accepts(Graph graph, const std::string& model_type);

}  // namespace mlxrt::model
