// The completion endpoints (mlx_lm/server.py's do_POST + handle_completion @ mlx-lm 0.32.2) over
// the job queue.
#include "mlxrt/server/completion_handler.h"

#include <httplib.h>

#include <filesystem>
#include <memory>

#include "mlxrt/generate/speculative.h"
#include "mlxrt/io/model_dir.h"
#include "mlxrt/server/completion_assembler.h"
#include "mlxrt/server/connection_probe.h"
#include "mlxrt/server/http_error.h"
#include "mlxrt/server/prompt_builder.h"
#include "mlxrt/server/python_json.h"
#include "mlxrt/server/sse.h"

namespace mlxrt::server {

namespace {

using namespace std::chrono_literals;

void reply_error(httplib::Response& res, int status, const std::string& message, const std::string& param = {}) {
  res.status = status;
  res.set_content(python_dumps(error_body(status, message, param)), "application/json");
}

}  // namespace

namespace {

/** The request's model field names the served model: "default_model", the --model value, or a
 * path or org/name[@revision] id of the local Hugging Face cache naming the served directory. */
bool names_served_model(const std::string& name, const ServerOptions& o, const ModelSession& s) {
  namespace fs = std::filesystem;
  if (name == "default_model" || name == o.model) return true;
  // The name /v1/models lists it by: its cache id, else its directory's name.
  if (auto fp = io::external_artifact_fingerprint(s.dir); fp && fp->rfind("hf:" + name + "@", 0) == 0) return true;
  if (name == std::filesystem::weakly_canonical(s.dir).filename().string()) return true;
  std::error_code ec;
  try {
    return fs::equivalent(io::resolve_model_dir(name), s.dir, ec);
  } catch (const Error&) {
    return false;
  }
}

std::string adapter_names(const ModelSession& s) {
  std::string out;
  for (const auto& [name, _] : s.adapter_models) out += (out.empty() ? "" : ", ") + name;
  return out;
}

/** The adapter that `model` selects as "<served model>@<adapter name>" ("" when it selects none). */
std::string adapter_in_model_name(const std::string& model, const ServerOptions& o, const ModelSession& s) {
  const auto at = model.rfind('@');
  if (at == std::string::npos || s.adapter_models.count(model.substr(at + 1)) == 0) return {};
  return names_served_model(model.substr(0, at), o, s) ? model.substr(at + 1) : std::string();
}

}  // namespace

std::string requested_adapter(const CompletionRequest& r, const ServerOptions& o, const ModelSession& s) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!s.startup) {
    // A model loaded by request runs as mlx_lm.server loads it: without an adapter.
    if (r.adapter)
      throw HttpError(400, "adapter '" + *r.adapter + "' is not served with model '" + r.model +
                               "': adapters apply to the model the server was started with", "adapters");
    return {};
  }
  const std::string by_model = adapter_in_model_name(r.model, o, s);
  if (!r.adapter) return by_model;
  std::optional<std::string> by_field;
  if (s.adapter_models.count(*r.adapter)) by_field = *r.adapter;
  for (const auto& [name, dir] : s.adapter_dirs)
    if (!by_field && fs::equivalent(*r.adapter, dir, ec)) by_field = name;
  // The --adapter-path adapter is the plain model's own.
  if (!by_field && !o.adapter_path.empty() && fs::equivalent(*r.adapter, o.adapter_path, ec)) by_field = "";
  if (!by_field) {
    std::string held = o.adapter_path.empty() ? std::string() : "'" + o.adapter_path + "' (--adapter-path)";
    if (!s.adapter_models.empty()) held += (held.empty() ? "" : " and ") + adapter_names(s) + " (--adapters)";
    throw HttpError(400, "adapter '" + *r.adapter + "' is not served here (" +
                             (held.empty() ? std::string("this server runs without adapters; start it with "
                                                         "--adapters name=DIR to choose one per request")
                                           : "this server holds " + held) + ")",
                    "adapters");
  }
  if (!by_model.empty() && *by_field != by_model)
    throw HttpError(400, "adapters names '" + *r.adapter + "' but model names the adapter '" + by_model + "'",
                    "adapters");
  return *by_field;
}

void check_model(const CompletionRequest& r, const ServerOptions& o, const ModelSession& s) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (s.startup && adapter_in_model_name(r.model, o, s).empty() && !names_served_model(r.model, o, s)) {
    const auto at = r.model.rfind('@');
    if (at != std::string::npos && !s.adapter_models.empty() && names_served_model(r.model.substr(0, at), o, s))
      throw HttpError(404, "model '" + r.model + "' is not served here: no adapter named '" + r.model.substr(at + 1) +
                               "' (adapters: " + adapter_names(s) + ")", "model");
    throw HttpError(404, "model '" + r.model + "' is not served here (this server holds '" + o.model + "')", "model");
  }
  requested_adapter(r, o, s);
  // mlx-lm loads the draft model a request names; this server holds the one --draft-model names.
  if (r.draft_model && *r.draft_model != "default_model" &&
      (!s.draft_model || (*r.draft_model != o.draft_model && !fs::equivalent(*r.draft_model, o.draft_model, ec))))
    throw HttpError(400,
                    s.draft_model ? "draft model '" + *r.draft_model + "' is not served here (this server drafts with '" +
                                        o.draft_model + "')"
                                  : "speculative decoding needs a server started with --draft-model",
                    "draft_model");
  if (s.loaded.model->multi_token_predictor() && (r.num_draft_tokens < 1 || r.num_draft_tokens > generate::kMaxDraftTokens))
    throw HttpError(400, "num_draft_tokens must be between 1 and " + std::to_string(generate::kMaxDraftTokens) +
                             " (the model's MTP head drafts, --mtp)",
                    "num_draft_tokens");
  if (s.draft_model && (r.num_draft_tokens < 0 || r.num_draft_tokens > generate::kMaxDraftTokens))
    throw HttpError(400, "num_draft_tokens must be between 0 and " + std::to_string(generate::kMaxDraftTokens),
                    "num_draft_tokens");
}

void check_prompt_length(const CompletionRequest& r, const PreparedPrompt& prompt, const ServerOptions& o,
                         const ModelSession& s, Logger& log) {
  const size_t n = prompt.tokens.size();
  const char* field = r.endpoint == Endpoint::chat ? "messages" : "prompt";
  if (o.max_prompt_tokens && n > static_cast<size_t>(*o.max_prompt_tokens))
    throw HttpError(400, "the prompt has " + std::to_string(n) + " tokens, more than this server takes (" +
                             std::to_string(*o.max_prompt_tokens) + ", --max-prompt-tokens)", field);
  const auto& config = s.loaded.config.raw();
  if (auto it = config.find("max_position_embeddings"); it != config.end() && it->is_number_integer()) {
    const long context = it->get<long>();
    if (context > 0 && static_cast<long>(n) > context)
      log.warning("the prompt has " + std::to_string(n) + " tokens, more than the model's context of " +
                  std::to_string(context) + " (max_position_embeddings): positions past it are beyond what the "
                  "model was trained on");
  }
}

namespace {

/** Waits for the job's StartedEvent. Returns false after writing the error reply. */
bool await_start(Job& job, httplib::Response& res, StartedEvent& started) {
  for (;;) {
    auto ev = job.pop(50ms);
    if (!ev) {
      if (job.should_stop()) {
        // A job still in the queue is dropped when the scheduler reaches it.
        reply_error(res, job.timed_out() ? 504 : 499, job.timed_out() ? "request timed out" : "client closed the request");
        return false;
      }
      continue;
    }
    if (auto* e = std::get_if<ErrorEvent>(&*ev)) {
      reply_error(res, e->status, e->message);
      return false;
    }
    if (auto* s = std::get_if<StartedEvent>(&*ev)) {
      started = *s;
      return true;
    }
  }
}

Usage usage_of(const StartedEvent& started, const CompletionAssembler& a) {
  return Usage{started.prompt_tokens, a.completion_tokens(), started.cached_tokens};
}

void serve_whole(std::shared_ptr<Job> job, std::shared_ptr<CompletionAssembler> assembler, StartedEvent started,
                 httplib::Response& res) {
  for (;;) {
    auto ev = job->pop(50ms);
    if (!ev) {
      job->should_stop();  // notices a vanished client or the deadline while the queue is quiet
      continue;
    }
    if (auto* t = std::get_if<TokenEvent>(&*ev)) {
      assembler->add(*t);
    } else if (auto* e = std::get_if<ErrorEvent>(&*ev)) {
      reply_error(res, e->status, e->message);
      return;
    } else if (std::holds_alternative<DoneEvent>(*ev)) {
      break;
    }
  }
  if (job->timed_out()) {
    reply_error(res, 504, "request timed out");
    return;
  }
  if (job->cancelled()) {
    reply_error(res, 503, "the server is shutting down");
    return;
  }
  res.status = 200;
  res.set_content(python_dumps(assembler->finish(usage_of(started, *assembler))), "application/json");
}

void serve_stream(std::shared_ptr<Job> job, std::shared_ptr<CompletionAssembler> assembler, StartedEvent started,
                  httplib::Response& res) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, assembler, started](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) {
          if (sink.write(s.data(), s.size())) return true;
          job->cancel();  // the client is gone: stop generating
          return false;
        };
        for (;;) {
          auto ev = job->pop(50ms);
          if (!ev) {
            if (job->should_stop() && job->cancelled()) return false;
            continue;
          }
          if (auto* p = std::get_if<ProgressEvent>(&*ev)) {
            if (!write(sse_keepalive(p->processed, p->total))) return false;
          } else if (auto* t = std::get_if<TokenEvent>(&*ev)) {
            if (auto chunk = assembler->add(*t))
              if (!write(sse_data(*chunk))) return false;
          } else if (auto* e = std::get_if<ErrorEvent>(&*ev)) {
            write(sse_data(error_body(e->status, e->message)));
            sink.done();
            return true;
          } else if (std::holds_alternative<DoneEvent>(*ev)) {
            if (job->timed_out() || job->cancelled()) {
              write(sse_data(job->timed_out() ? error_body(504, "request timed out")
                                              : error_body(503, "the server is shutting down")));
              sink.done();
              return true;
            }
            for (const auto& chunk : assembler->finish_stream(usage_of(started, *assembler)))
              if (!write(sse_data(chunk))) return false;
            if (!write(sse_done())) return false;
            sink.done();
            return true;
          }
        }
      },
      [job](bool) {
        job->cancel();
        job->clear_probe();
      });
}

}  // namespace

void handle_completion_request(const ServerOptions& options, Logger& log, ModelPool& models,
                               Scheduler& scheduler, const std::string& fingerprint, const httplib::Request& req,
                               httplib::Response& res, Endpoint endpoint) {
  std::shared_ptr<Job> job;
  std::shared_ptr<ModelSession> held;
  CompletionRequest request;
  try {
    request = parse_completion_request(req.body, endpoint, options);
    const auto deadline = Job::deadline_after(options.request_timeout_s);
    held = models.acquire(request.model, scheduler, deadline);
    check_model(request, options, *held);
    PreparedPrompt prompt = build_prompt(request, *held, options);
    check_prompt_length(request, prompt, options, *held, log);
    job = std::make_shared<Job>(request, std::move(prompt), deadline);
    job->set_session(held);
  } catch (const HttpError& e) {
    log.debug(std::string("rejected request: ") + e.what());
    reply_error(res, e.status(), e.what(), e.param());
    return;
  } catch (const UsageError& e) {
    reply_error(res, 400, e.what());
    return;
  }

  auto probe = std::make_shared<ConnectionProbe>(req.remote_addr, req.remote_port, req.local_port);
  job->set_probe([probe] { return probe->client_gone(); });
  ProbeGuard guard{job};
  try {
    scheduler.submit(job);
  } catch (const HttpError& e) {
    reply_error(res, e.status(), e.what());
    return;
  }
  StartedEvent started{};
  if (!await_start(*job, res, started)) return;

  auto meta = make_response_meta(endpoint, request.stream, request.model, fingerprint);
  auto assembler = std::make_shared<CompletionAssembler>(
      meta, request, make_text_state_machine(held->markers, request.stop), job->prompt().initial_state,
      held->tool_parser ? &*held->tool_parser : nullptr);
  if (request.stream) {
    serve_stream(job, assembler, started, res);
    guard.job.reset();  // the stream's releaser takes over
  } else {
    serve_whole(job, assembler, started, res);
  }
}

}  // namespace mlxrt::server
