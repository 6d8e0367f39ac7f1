#pragma once
/** POST /v1/embeddings in OpenAI's shape: `input` as a string, a list of strings, a list of token
 * ids or a list of such lists; `encoding_format` float or base64; `dimensions` (the first N,
 * normalised after truncation when the model normalises); `usage`. Texts are tokenized on the
 * connection's thread, the model runs on the generation thread (a job of its own), each input
 * alone (see generate/embedding.h). Errors are 4xx in OpenAI's shape naming the field. */
#include <optional>
#include <string>

#include "mlxrt/generate/embedding.h"
#include "mlxrt/server/chat_turn.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace mlxrt::server {

class EmbeddingsApi {
 public:
  void handle(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res) const;
};

}  // namespace mlxrt::server
