#pragma once
/** The models a server holds, loaded as requests name them (mlx_lm.server's ModelProvider): a
 * request's `model` is "default_model" or the start-up model's name (with MODEL@ADAPTER for its
 * --adapters), a local model directory, or an `org/name[@revision]` id of the local Hugging Face
 * cache. mlx-lm keeps one model resident and loading another replaces it; --max-models N keeps up
 * to N, least recently used first out. A job holds its model (shared_ptr), so a model replaced
 * while requests still run on it lives until they end. */
#include <cstddef>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "mlxrt/server/job.h"
#include "mlxrt/server/logger.h"
#include "mlxrt/server/memory_admission.h"
#include "mlxrt/server/metrics.h"
#include "mlxrt/server/model_session.h"
#include "mlxrt/server/options.h"
#include "mlxrt/server/scheduler.h"

namespace mlxrt::server {

class ModelPool {
 public:
  /** Loads the start-up model (options.model) on the calling thread; errors name the flag or file. */
  ModelPool(const ServerOptions& options, Logger& log, ServerMetrics& metrics);

  /** The start-up model as first loaded, while it is alive (the generator's initial model). */
  std::shared_ptr<ModelSession> startup() const { return startup_.lock(); }

  /** The model a request's `model` field names, loaded on the generation thread (through
   * `scheduler`, as mlx_lm.server loads in its generation loop) when it is not resident.
   * HttpError(404, naming `model`) when the name is no model directory or cache entry, or the
   * model cannot be loaded (mlx_lm.server answers 404 with the error); the models already loaded
   * stay. */
  std::shared_ptr<ModelSession> acquire(const std::string& model, Scheduler& scheduler,
                                        std::optional<Job::Clock::time_point> deadline);

  /** `model` names the start-up model: "default_model", the --model value, its /v1/models id,
   * a path or cache id resolving to its directory, or any of these followed by "@ADAPTER". */
  bool names_startup(const std::string& model) const;

  /** The start-up model's /v1/models id without its path: the cache id when it came from the
   * Hugging Face cache, else its directory's name. */
  const std::string& startup_id() const { return startup_id_; }
  /** The start-up model's cache id (org/name) when it is a Hugging Face cache snapshot. */
  const std::optional<std::string>& startup_repo_id() const { return startup_repo_id_; }

  /** Models resident now. */
  size_t resident() const;

  /** Memory admission (may be null): a model is sized before it loads, and the resident models'
   * weights are counted after each load. */
  void set_admission(std::shared_ptr<MemoryAdmission> admission);

 private:
  /** On the generation thread: the resident model of `key`, else loaded (then the least recently
   * used beyond --max-models dropped). */
  std::shared_ptr<ModelSession> load(const std::string& key, const std::filesystem::path& dir, const std::string& name);
  bool names_startup_exactly(const std::string& model) const;

  const ServerOptions& options_;
  Logger& log_;
  ServerMetrics& metrics_;
  size_t max_models_;
  std::weak_ptr<ModelSession> startup_;
  std::filesystem::path startup_dir_;
  std::string startup_id_;
  std::optional<std::string> startup_repo_id_;
  mutable std::mutex mutex_;
  std::list<std::pair<std::string, std::shared_ptr<ModelSession>>> resident_;  // front: most recently used
  std::shared_ptr<MemoryAdmission> admission_;
};

}  // namespace mlxrt::server
