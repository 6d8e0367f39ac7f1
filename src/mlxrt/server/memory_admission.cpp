#include "mlxrt/server/memory_admission.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>

#include <mlx/memory.h>

#include "mlxrt/server/http_error.h"
#include "mlxrt/server/logger.h"
#include "mlxrt/server/metrics.h"
#include "mlxrt/server/model_session.h"
#include "mlxrt/server/options.h"

namespace mlxrt::server {

namespace {

std::string gb(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GB", bytes / 1e9);
  return buf;
}

}  // namespace

MemoryAdmission::MemoryAdmission(size_t budget_bytes, size_t weights_bytes, std::function<size_t(const Job&)> kv_bytes,
                                 std::function<size_t(const std::filesystem::path&)> weights_of, ServerMetrics* metrics)
    : budget_(budget_bytes),
      weights_(weights_bytes),
      kv_bytes_(std::move(kv_bytes)),
      weights_of_(std::move(weights_of)),
      metrics_(metrics) {
  publish();
}

void MemoryAdmission::models_resident(const std::vector<std::filesystem::path>& dirs) {
  size_t total = 0;
  for (const auto& dir : dirs) total += weights_of_(dir);
  {
    std::lock_guard lock(mutex_);
    weights_ = total;
  }
  publish();
}

void MemoryAdmission::check_load(const std::filesystem::path& dir, const std::string& name,
                                 const std::vector<std::filesystem::path>& staying) const {
  const size_t own = weights_of_(dir);
  size_t others = 0;
  for (const auto& d : staying) others += weights_of_(d);
  if (own + others > budget_)
    throw HttpError(503, "model '" + name + "' needs " + gb(own) + " for its weights" +
                             (others ? " beside the " + gb(others) + " of the models that stay loaded" : "") +
                             ", more than the server's memory budget of " + gb(budget_) + " (--max-memory)");
}

void MemoryAdmission::check(const Job& job) const {
  if (job.task()) return;  // embeddings and other tasks keep no KV cache
  const size_t kv = kv_bytes_(job);
  size_t weights;
  {
    std::lock_guard lock(mutex_);
    weights = weights_;
  }
  if (weights + kv > budget_)
    throw HttpError(503, "the request needs " + gb(kv) + " of KV cache for " +
                             std::to_string(job.prompt().tokens.size()) + " prompt tokens and max_tokens " +
                             std::to_string(job.request().max_tokens) + "; with the weights (" + gb(weights) +
                             ") that is more than the server's memory budget of " + gb(budget_) +
                             " (--max-memory): shorten the prompt or lower max_tokens");
}

bool MemoryAdmission::try_admit(const std::shared_ptr<Job>& job) {
  if (job->task()) return true;
  const size_t kv = kv_bytes_(*job);
  {
    std::lock_guard lock(mutex_);
    if (weights_ + in_use_ + kv > budget_) return false;
    admitted_.emplace_back(job, kv);
    in_use_ += kv;
  }
  publish();
  return true;
}

void MemoryAdmission::release(const Job& job) {
  {
    std::lock_guard lock(mutex_);
    for (auto it = admitted_.begin(); it != admitted_.end(); ++it)
      if (it->first.get() == &job) {
        in_use_ -= it->second;
        admitted_.erase(it);
        break;
      }
  }
  publish();
}

void MemoryAdmission::release_finished() {
  {
    std::lock_guard lock(mutex_);
    auto done = std::remove_if(admitted_.begin(), admitted_.end(), [&](const auto& a) {
      if (!a.first->finished()) return false;
      in_use_ -= a.second;
      return true;
    });
    admitted_.erase(done, admitted_.end());
  }
  publish();
}

void MemoryAdmission::note_wait() {
  {
    std::lock_guard lock(mutex_);
    ++waits_;
  }
  publish();
}

size_t MemoryAdmission::admitted_bytes() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}

void MemoryAdmission::publish() const {
  if (!metrics_) return;
  size_t in_use, waits, weights;
  {
    std::lock_guard lock(mutex_);
    in_use = in_use_;
    waits = waits_;
    weights = weights_;
  }
  metrics_->memory_state(weights, in_use, budget_, waits);
}

namespace {

/** What admission knows of a model, by its directory: the memory geometry of a lazily bound copy
 * (no weight is read; the served one may stream its experts, whose store a forward would touch)
 * and its context length. Worked out once per directory; null for a model whose memory cannot be
 * estimated (it reserves nothing). */
class ModelSizes {
 public:
  struct Entry {
    model::ModelMemoryGeometry geometry;
    std::optional<int> context;
  };

  explicit ModelSizes(Logger& log) : log_(log) {}

  /** Throws the estimate's error (the start-up model's decides whether admission is on). */
  std::shared_ptr<const Entry> compute(const std::filesystem::path& dir) const {
    model::LoadOptions lazy;
    lazy.lazy = true;
    auto loaded = model::load_model(dir, lazy);
    std::optional<int> context;
    if (auto it = loaded.config.raw().find("max_position_embeddings");
        it != loaded.config.raw().end() && it->is_number_integer() && it->get<int>() > 0)
      context = it->get<int>();
    return std::make_shared<const Entry>(Entry{model::memory_geometry(loaded, std::nullopt), context});
  }

  void put(const std::filesystem::path& dir, std::shared_ptr<const Entry> entry) {
    std::lock_guard lock(mutex_);
    entries_[dir.string()] = std::move(entry);
  }

  std::shared_ptr<const Entry> get(const std::filesystem::path& dir) {
    {
      std::lock_guard lock(mutex_);
      if (auto it = entries_.find(dir.string()); it != entries_.end()) return it->second;
    }
    std::shared_ptr<const Entry> entry;
    try {
      entry = compute(dir);
    } catch (const Error& e) {
      log_.warning("memory admission: no estimate for " + dir.string() + " (" + e.what() + "): its requests "
                   "reserve nothing");
    }
    put(dir, entry);
    return entry;
  }

 private:
  Logger& log_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Entry>> entries_;
};

}  // namespace

std::shared_ptr<MemoryAdmission> make_memory_admission(const ModelSession& session, const ServerOptions& options,
                                                       ServerMetrics& metrics, Logger& log) {
  auto sizes = std::make_shared<ModelSizes>(log);
  std::shared_ptr<const ModelSizes::Entry> startup;
  try {
    startup = sizes->compute(session.dir);
  } catch (const Error& e) {
    if (options.max_memory_gb) throw UsageError(std::string("--max-memory: ") + e.what());
    log.warning(std::string("memory admission is off: ") + e.what());
    return nullptr;
  }
  sizes->put(session.dir, startup);
  size_t budget = 0;
  if (options.max_memory_gb) {
    if (*options.max_memory_gb <= 0) throw UsageError("--max-memory must be positive");
    budget = static_cast<size_t>(*options.max_memory_gb * 1e9);
  } else {
    // What the device has now plus what MLX already holds (the weights), less the headroom fit
    // keeps for the backend.
    auto device = model::device_memory();
    size_t available = device.available_bytes;
    if (device.device == "cpu") available += mlx::core::get_active_memory();
    const size_t fixed = device.device == "gpu" ? (size_t{1} << 30) : (size_t{128} << 20);
    budget = available > fixed ? (available - fixed) / 20 * 19 : 0;
  }
  if (budget < startup->geometry.weights_bytes)
    throw UsageError("--max-memory: the budget of " + gb(budget) + " is below the model's weights (" +
                     gb(startup->geometry.weights_bytes) + ")");
  auto kv_bytes = [sizes, dir = session.dir, kv_bits = options.kv_bits, group = options.kv_group_size,
                   start = options.quantized_kv_start, step = options.prefill_step_size](const Job& job) -> size_t {
    const auto entry = sizes->get(job.session() ? job.session()->dir : dir);
    if (!entry) return 0;
    const long prompt = std::max<long>(1, static_cast<long>(job.prompt().tokens.size()));
    long positions = prompt + std::max(0, job.request().max_tokens);
    if (entry->context) positions = std::min<long>(positions, std::max<long>(*entry->context, prompt));
    model::RunShape run;
    run.context = static_cast<int>(positions);
    run.prompt = static_cast<int>(prompt);
    run.prefill_step_size = std::max(1, step);
    run.kv_bits = kv_bits;
    run.kv_group_size = group;
    run.quantized_kv_start = start;
    try {
      return model::sequence_kv_bytes(entry->geometry, run).peak_bytes;
    } catch (const UnsupportedError&) {  // --kv-bits on a rotating cache: generation refuses it itself
      run.kv_bits.reset();
      return model::sequence_kv_bytes(entry->geometry, run).peak_bytes;
    }
  };
  auto weights_of = [sizes](const std::filesystem::path& dir) -> size_t {
    const auto entry = sizes->get(dir);
    return entry ? entry->geometry.weights_bytes : 0;
  };
  return std::make_shared<MemoryAdmission>(budget, startup->geometry.weights_bytes, kv_bytes, weights_of, &metrics);
}

}  // namespace mlxrt::server
