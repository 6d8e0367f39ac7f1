// mlx_lm.server's ModelProvider (mlx_lm/server.py @ mlx-lm 0.32.2: load, _load, the
// "default_model" map) with an LRU of resident models in place of its single one.
#include "mlxrt/server/model_pool.h"

#include <chrono>
#include <system_error>

#include "mlxrt/io/model_dir.h"
#include "mlxrt/model/parallel.h"
#include "mlxrt/model/profile.h"
#include "mlxrt/server/http_error.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::server {

namespace fs = std::filesystem;

namespace {

/** `text` with every occurrence of `what` replaced by `with`. */
std::string replace_all(std::string text, const std::string& what, const std::string& with) {
  if (what.empty()) return text;
  for (size_t p = 0; (p = text.find(what, p)) != std::string::npos; p += with.size()) text.replace(p, what.size(), with);
  return text;
}

/** The resolved directory's own name for keys and messages: canonical when it can be. */
fs::path canonical_or_given(const fs::path& dir) {
  std::error_code ec;
  auto c = fs::canonical(dir, ec);
  return ec ? dir : c;
}

/** The tier a model computes at, as its resolved profile declares it: "fidelity l1 bit-exact" unless
 * --fidelity l3 (or an artifact's profile) says otherwise. */
std::string fidelity_text(const ModelSession& session) {
  const auto fidelity = model::to_json(session.loaded.profile.profile)["fidelity"];
  return "fidelity " + fidelity["tier"].get<std::string>() + " " + fidelity["claim"].get<std::string>();
}

}  // namespace

ModelPool::ModelPool(const ServerOptions& options, Logger& log, ServerMetrics& metrics)
    : options_(options), log_(log), metrics_(metrics), max_models_(static_cast<size_t>(std::max(1, options.max_models))) {
  auto session = std::make_shared<ModelSession>(load_model_session(options, log));
  session->startup = true;
  session->key = "";
  startup_dir_ = canonical_or_given(session->dir);
  // "hf:org/name@sha" for a cache snapshot: the id /v1/models lists (as mlx_lm.server's cache scan).
  if (auto fp = io::external_artifact_fingerprint(session->dir)) {
    const auto at = fp->rfind('@');
    startup_repo_id_ = fp->substr(3, at == std::string::npos ? std::string::npos : at - 3);
  }
  startup_id_ = startup_repo_id_ ? *startup_repo_id_ : startup_dir_.filename().string();
  log.info("model '" + startup_id_ + "': " + fidelity_text(*session));
  startup_ = session;
  resident_.emplace_front("", std::move(session));
  metrics_.model_loaded(1);
}

bool ModelPool::names_startup_exactly(const std::string& model) const {
  if (model == "default_model" || model == options_.model || model == startup_id_) return true;
  std::error_code ec;
  try {
    return fs::equivalent(io::resolve_model_dir(model), startup_dir_, ec);
  } catch (const Error&) {
    return false;
  }
}

bool ModelPool::names_startup(const std::string& model) const {
  if (names_startup_exactly(model)) return true;
  const auto at = model.rfind('@');
  return at != std::string::npos && at > 0 && names_startup_exactly(model.substr(0, at));
}

void ModelPool::set_admission(std::shared_ptr<MemoryAdmission> admission) {
  std::lock_guard lock(mutex_);
  admission_ = std::move(admission);
}

size_t ModelPool::resident() const {
  std::lock_guard lock(mutex_);
  return resident_.size();
}

std::shared_ptr<ModelSession> ModelPool::acquire(const std::string& model, Scheduler& scheduler,
                                                 std::optional<Job::Clock::time_point> deadline) {
  std::string key;
  fs::path dir;
  if (!names_startup(model)) {
    // Every rank would have to load it at the same step, which a distributed server here does
    // not do: it serves its --model.
    if (options_.parallel)
      throw HttpError(404,
                      "model '" + model + "' cannot be served: this server runs distributed over " +
                          std::to_string(options_.parallel->size()) + " processes and serves only its --model",
                      "model");
    try {
      dir = canonical_or_given(io::resolve_model_dir(model));
    } catch (const Error& e) {
      std::error_code ec;
      // A path the client gave is named in its own words; a cache miss does not show where the
      // server's cache is.
      if (fs::exists(model, ec))
        throw HttpError(404, "model '" + model + "' cannot be served: " + e.what(), "model");
      throw HttpError(404,
                      "model '" + model + "' not found: it is neither a model directory nor an org/name id of a model "
                      "in the server's Hugging Face cache",
                      "model");
    }
    key = dir.string();
  }
  {
    std::lock_guard lock(mutex_);
    for (auto it = resident_.begin(); it != resident_.end(); ++it)
      if (it->first == key) {
        resident_.splice(resident_.begin(), resident_, it);
        return resident_.front().second;
      }
  }
  // Not resident: loaded on the generation thread, between jobs (a batch in progress drains first).
  auto loaded = std::make_shared<std::shared_ptr<ModelSession>>();
  auto job = std::make_shared<Job>(
      [this, loaded, key, dir, model](Job& j) {
        try {
          *loaded = load(key, dir, model);
          j.push(DoneEvent{});
        } catch (const HttpError& e) {  // memory admission: the model would not fit
          log_.error("cannot load model '" + model + "': " + e.what());
          j.push(ErrorEvent{e.status(), e.what()});
        } catch (const std::exception& e) {
          std::string what = e.what();
          if (!dir.empty()) what = replace_all(what, dir.string(), model);
          log_.error("cannot load model '" + model + "': " + what);
          j.push(ErrorEvent{404, "model '" + model + "' cannot be loaded: " + what});
        }
      },
      deadline);
  ProbeGuard guard{job};
  scheduler.submit(job);
  for (;;) {
    auto ev = job->pop(std::chrono::milliseconds(50));
    if (!ev) {
      if (job->should_stop())
        throw HttpError(job->timed_out() ? 504 : 499,
                        job->timed_out() ? "request timed out while its model loaded" : "client closed the request");
      continue;
    }
    if (auto* e = std::get_if<ErrorEvent>(&*ev)) throw HttpError(e->status, e->message, "model");
    if (std::holds_alternative<DoneEvent>(*ev)) return *loaded;
  }
}

std::shared_ptr<ModelSession> ModelPool::load(const std::string& key, const fs::path& dir, const std::string& name) {
  {
    // Another request may have loaded it while this one waited in the queue.
    std::lock_guard lock(mutex_);
    for (auto it = resident_.begin(); it != resident_.end(); ++it)
      if (it->first == key) {
        resident_.splice(resident_.begin(), resident_, it);
        return resident_.front().second;
      }
  }
  // The start-up model comes back with its adapters and draft model; another model is loaded as
  // mlx_lm.server loads a requested one: no adapter, no draft model, the server's chat template.
  ServerOptions o = options_;
  if (!key.empty()) {
    o.model = dir.string();
    o.adapter_path.clear();
    o.adapters.clear();
    o.draft_model.clear();
    o.mtp = false;
  }
  std::shared_ptr<MemoryAdmission> admission;
  {
    std::lock_guard lock(mutex_);
    admission = admission_;
  }
  if (admission) {
    // The models that stay once this one is in: the most recently used, up to --max-models - 1.
    std::vector<fs::path> staying;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [k, s] : resident_)
        if (staying.size() + 1 < max_models_) staying.push_back(s->dir);
    }
    admission->check_load(key.empty() ? startup_dir_ : dir, name, staying);
  }
  const auto started = std::chrono::steady_clock::now();
  auto session = std::make_shared<ModelSession>(load_model_session(o, log_));
  session->startup = key.empty();
  session->key = key;
  std::vector<std::shared_ptr<ModelSession>> dropped;  // released outside the lock
  std::vector<fs::path> dirs;
  size_t count = 0;
  {
    std::lock_guard lock(mutex_);
    resident_.emplace_front(key, session);
    while (resident_.size() > max_models_) {
      dropped.push_back(std::move(resident_.back().second));
      resident_.pop_back();
    }
    count = resident_.size();
    for (const auto& [k, s] : resident_) dirs.push_back(s->dir);
  }
  if (admission) admission->models_resident(dirs);
  metrics_.model_loaded(count);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  log_.info("loaded model '" + name + "' in " + std::to_string(seconds) + " s, " + fidelity_text(*session) + " (" +
            std::to_string(count) + " resident, --max-models " + std::to_string(max_models_) + ")");
  return session;
}

}  // namespace mlxrt::server
