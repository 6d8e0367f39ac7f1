#include "mlxrt/server/memory_admission.h"

#include <algorithm>
#include <cstdio>

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
                                 ServerMetrics* metrics)
    : budget_(budget_bytes), weights_(weights_bytes), kv_bytes_(std::move(kv_bytes)), metrics_(metrics) {
  publish();
}

void MemoryAdmission::check(const Job& job) const {
  if (job.task()) return;  // embeddings and other tasks keep no KV cache
  const size_t kv = kv_bytes_(job);
  if (weights_ + kv > budget_)
    throw HttpError(503, "the request needs " + gb(kv) + " of KV cache for " +
                             std::to_string(job.prompt().tokens.size()) + " prompt tokens and max_tokens " +
                             std::to_string(job.request().max_tokens) + "; with the weights (" + gb(weights_) +
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
  size_t in_use, waits;
  {
    std::lock_guard lock(mutex_);
    in_use = in_use_;
    waits = waits_;
  }
  metrics_->memory_state(weights_, in_use, budget_, waits);
}

std::shared_ptr<MemoryAdmission> make_memory_admission(const ModelSession& session, const ServerOptions& options,
                                                       ServerMetrics& metrics, Logger& log) {
  // The geometry of a second, lazily bound copy of the model (no weight is read): the served one
  // may stream its experts, whose store a forward would touch.
  std::shared_ptr<model::ModelMemoryGeometry> geometry;
  try {
    model::LoadOptions lazy;
    lazy.lazy = true;
    geometry = std::make_shared<model::ModelMemoryGeometry>(
        model::memory_geometry(model::load_model(session.dir, lazy), std::nullopt));
  } catch (const Error& e) {
    if (options.max_memory_gb) throw UsageError(std::string("--max-memory: ") + e.what());
    log.warning(std::string("memory admission is off: ") + e.what());
    return nullptr;
  }
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
  if (budget < geometry->weights_bytes)
    throw UsageError("--max-memory: the budget of " + gb(budget) + " is below the model's weights (" +
                     gb(geometry->weights_bytes) + ")");
  std::optional<int> context;
  if (auto it = session.loaded.config.raw().find("max_position_embeddings");
      it != session.loaded.config.raw().end() && it->is_number_integer() && it->get<int>() > 0)
    context = it->get<int>();
  // The geometry is the start-up model's: a request on a model loaded by request (--max-models,
  // another directory) reserves nothing, since its geometry is not this one.
  auto kv_bytes = [geometry, context, dir = session.dir, kv_bits = options.kv_bits, group = options.kv_group_size,
                   start = options.quantized_kv_start, step = options.prefill_step_size](const Job& job) -> size_t {
    if (job.session() && job.session()->dir != dir) return 0;
    const long prompt = std::max<long>(1, static_cast<long>(job.prompt().tokens.size()));
    long positions = prompt + std::max(0, job.request().max_tokens);
    if (context) positions = std::min<long>(positions, std::max<long>(*context, prompt));
    model::RunShape run;
    run.context = static_cast<int>(positions);
    run.prompt = static_cast<int>(prompt);
    run.prefill_step_size = std::max(1, step);
    run.kv_bits = kv_bits;
    run.kv_group_size = group;
    run.quantized_kv_start = start;
    try {
      return model::sequence_kv_bytes(*geometry, run).peak_bytes;
    } catch (const UnsupportedError&) {  // --kv-bits on a rotating cache: generation refuses it itself
      run.kv_bits.reset();
      return model::sequence_kv_bytes(*geometry, run).peak_bytes;
    }
  };
  return std::make_shared<MemoryAdmission>(budget, geometry->weights_bytes, kv_bytes, &metrics);
}

}  // namespace mlxrt::server
