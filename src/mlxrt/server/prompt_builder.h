#pragma once
/** Request -> prompt tokens, as mlx_lm.server's _tokenize does it: chat messages through the chat
 * template (tools and template kwargs included) or, for a model without one, mlx-lm's plain
 * role-prefix layout; text prompts encoded with the tokenizer's special tokens. Safe to call from
 * many threads at once. */
#include "mlxrt/server/job.h"
#include "mlxrt/server/model_session.h"
#include "mlxrt/server/options.h"
#include "mlxrt/server/request.h"

namespace mlxrt::server {

/** HttpError(400) when the template refuses the messages or the prompt comes out empty. */
PreparedPrompt build_prompt(const CompletionRequest& request, const ModelSession& session,
                            const ServerOptions& options);

/** mlx_lm.server's convert_chat: the prompt for a model without a chat template. */
std::string convert_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& role_mapping);

}  // namespace mlxrt::server
