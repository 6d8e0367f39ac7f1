#pragma once
/** The completion endpoints: body -> typed request -> prompt tokens (on the connection's thread),
 * then the job through the scheduler, its events written back as one JSON response or as
 * server-sent events. A client that goes away, or a request past its deadline, cancels the job. */
#include <string>

#include "mlxrt/server/logger.h"
#include "mlxrt/server/model_pool.h"
#include "mlxrt/server/model_session.h"
#include "mlxrt/server/options.h"
#include "mlxrt/server/request.h"
#include "mlxrt/server/scheduler.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace mlxrt::server {

/** The request fits `session`, the model its `model` field was resolved to (ModelPool::acquire):
 * for the start-up model, an adapter it holds; for a model loaded by request, no adapter; a draft
 * model only where the server drafts. HttpError naming the field otherwise (shared by every API
 * that generates). */
void check_model(const CompletionRequest& request, const ServerOptions& options, const ModelSession& session);

/** After the prompt is built: HttpError(400) when it is longer than --max-prompt-tokens; a warning
 * in the log when it is longer than the model's context (max_position_embeddings), as the Hugging
 * Face tokenizer under mlx_lm.server warns (the request still runs, as there). */
void check_prompt_length(const CompletionRequest& request, const PreparedPrompt& prompt, const ServerOptions& options,
                         const ModelSession& session, Logger& log);

/** The adapter a request runs with: a --adapters name chosen by its `adapters` field (a name or an
 * adapter directory) or by a model name "<model>@<adapter>"; "" for the plain model (which carries
 * --adapter-path's adapter, if any). HttpError(400) naming `adapters` for an adapter not served or
 * two fields that disagree. */
std::string requested_adapter(const CompletionRequest& request, const ServerOptions& options,
                              const ModelSession& session);

void handle_completion_request(const ServerOptions& options, Logger& log, ModelPool& models,
                               Scheduler& scheduler, const std::string& fingerprint, const httplib::Request& req,
                               httplib::Response& res, Endpoint endpoint);

}  // namespace mlxrt::server
