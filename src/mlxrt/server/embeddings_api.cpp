// POST /v1/embeddings (OpenAI's embeddings API) on the served model's pooled hidden states.
#include "mlxrt/server/embeddings_api.h"

#include <httplib.h>

#include <chrono>
#include <memory>

#include "mlxrt/server/api_fields.h"
#include "mlxrt/server/completion_handler.h"
#include "mlxrt/server/http_error.h"
#include "mlxrt/server/python_json.h"
#include "mlxrt/server/request.h"

namespace mlxrt::server {

namespace {

using namespace std::chrono_literals;
using nlohmann::ordered_json;
using api_fields::at;
using api_fields::bad;

// OpenAI's limit on the inputs of one request.
constexpr size_t kMaxInputs = 2048;

struct EmbeddingRequest {
  std::string model = "default_model";
  std::vector<std::vector<int32_t>> inputs;
  bool base64 = false;
  std::optional<int> dimensions;
  std::optional<std::string> adapter;  // "adapters", as in the completion endpoints
};

std::vector<int32_t> token_ids(const ordered_json& list, const std::string& field, int vocab) {
  if (list.empty()) bad(field, "a token list must not be empty");
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (size_t j = 0; j < list.size(); ++j) {
    const auto& v = list[j];
    if (!v.is_number_integer()) bad(at(field, j), "a token id must be an integer");
    const auto id = v.get<int64_t>();
    if (id < 0 || id >= vocab)
      bad(at(field, j), "token id " + std::to_string(id) + " is outside the model's vocabulary (0.." +
                            std::to_string(vocab - 1) + ")");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::vector<int32_t> text_ids(const ordered_json& v, const std::string& field, const ModelSession& s) {
  const auto& text = v.get_ref<const std::string&>();
  if (text.empty()) bad(field, "an input text must not be empty");
  auto ids = s.tokenizer.encode(text, true);
  if (ids.empty()) bad(field, "the text has no tokens");
  return ids;
}

EmbeddingRequest parse(const std::string& body, const ModelSession& s) {
  const ordered_json j = parse_request_body(body);
  EmbeddingRequest r;
  if (auto* m = api_fields::find(j, "model")) {
    if (!m->is_string()) bad("model", "must be a string");
    r.model = m->get<std::string>();
  }
  if (auto* f = api_fields::find(j, "encoding_format")) {
    if (!f->is_string() || (*f != "float" && *f != "base64")) bad("encoding_format", "must be 'float' or 'base64'");
    r.base64 = *f == "base64";
  }
  if (auto* d = api_fields::find(j, "dimensions")) {
    if (!d->is_number_integer() || d->get<int64_t>() < 1 || d->get<int64_t>() > (1 << 30))
      bad("dimensions", "must be a positive integer");
    r.dimensions = static_cast<int>(d->get<int64_t>());
  }
  if (auto* u = api_fields::find(j, "user"); u && !u->is_string()) bad("user", "must be a string");
  if (auto* a = api_fields::find(j, "adapters")) {
    if (!a->is_string()) bad("adapters", "must be a string");
    r.adapter = a->get<std::string>();
  }
  const ordered_json* input = api_fields::find(j, "input");
  if (!input) bad("input", "is required: a string, a list of strings, a list of token ids or a list of such lists");
  const int vocab = s.loaded.model->vocab_size();
  if (input->is_string()) {
    r.inputs.push_back(text_ids(*input, "input", s));
    return r;
  }
  if (!input->is_array())
    bad("input", "must be a string, a list of strings, a list of token ids or a list of such lists");
  if (input->empty()) bad("input", "must not be empty");
  if (input->size() > kMaxInputs) bad("input", "holds more than " + std::to_string(kMaxInputs) + " inputs");
  const auto& first = input->front();
  if (first.is_number_integer()) {
    r.inputs.push_back(token_ids(*input, "input", vocab));
    return r;
  }
  for (size_t i = 0; i < input->size(); ++i) {
    const auto& v = (*input)[i];
    if (first.is_string() && v.is_string())
      r.inputs.push_back(text_ids(v, at("input", i), s));
    else if (first.is_array() && v.is_array())
      r.inputs.push_back(token_ids(v, at("input", i), vocab));
    else
      bad(at("input", i), "every item of input must be of one kind: all strings, all token ids, or all token-id lists");
  }
  return r;
}

struct Outcome {
  std::vector<std::vector<float>> vectors;
};

/** Waits for the job's DoneEvent; HttpError for its ErrorEvent, a deadline or a vanished client. */
void await_done(Job& job) {
  for (;;) {
    auto ev = job.pop(50ms);
    if (!ev) {
      if (job.should_stop())
        throw HttpError(job.timed_out() ? 504 : 499, job.timed_out() ? "request timed out" : "client closed the request");
      continue;
    }
    if (auto* e = std::get_if<ErrorEvent>(&*ev)) throw HttpError(e->status, e->message);
    if (std::holds_alternative<DoneEvent>(*ev)) return;
  }
}

}  // namespace

void EmbeddingsApi::handle(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res) const {
  auto reply_error = [&res](int status, const std::string& message, const std::string& param = {}) {
    res.status = status;
    res.set_content(python_dumps(error_body(status, message, param)), "application/json");
  };
  try {
    if (req.body.size() > ctx.options.max_body_bytes)
      throw HttpError(413, "request body is larger than " + std::to_string(ctx.options.max_body_bytes) + " bytes");
    // The model first (its tokenizer reads the inputs): the body's "model" when it is a string.
    const auto deadline = Job::deadline_after(ctx.options.request_timeout_s);
    std::string named = "default_model";
    const ordered_json body = parse_request_body(req.body);
    if (auto* m = api_fields::find(body, "model"); m && m->is_string()) named = m->get<std::string>();
    std::shared_ptr<ModelSession> held = ctx.models.acquire(named, ctx.scheduler, deadline);
    EmbeddingRequest r = parse(req.body, *held);
    CompletionRequest as_completion;
    as_completion.model = r.model;
    as_completion.adapter = r.adapter;
    check_model(as_completion, ctx.options, *held);
    model::CausalLM& model = held->model_for(requested_adapter(as_completion, ctx.options, *held));
    // The model's sentence-transformers config; one that cannot be used is this request's error
    // (chat and completions are not affected).
    std::optional<generate::EmbeddingConfig> config_read;
    try {
      config_read = generate::read_embedding_config(held->dir);
    } catch (const Error& e) {
      throw HttpError(400, std::string("this model cannot serve embeddings: ") + e.what(), "model");
    }
    if (!held->loaded.model->has_hidden_states())
      throw HttpError(400, "this model cannot serve embeddings: the " + held->loaded.config.model_type() +
                               " family does not expose its hidden states here", "model");
    if (r.dimensions && config_read->width && *r.dimensions > *config_read->width)
      throw HttpError(400, "dimensions is " + std::to_string(*r.dimensions) + " but the model's embeddings have " +
                               std::to_string(*config_read->width), "dimensions");

    auto outcome = std::make_shared<Outcome>();
    const generate::EmbeddingConfig config = *config_read;
    // The task holds the model (`held`) while it runs, whatever the pool does meanwhile.
    auto job = std::make_shared<Job>(
        [outcome, inputs = r.inputs, config, dims = r.dimensions, &model, held](Job& j) {
          try {
            for (const auto& ids : inputs) {
              if (j.should_stop()) break;
              outcome->vectors.push_back(generate::to_floats(generate::embed_tokens(model, ids, config, dims)));
            }
          } catch (const UsageError& e) {
            throw HttpError(400, e.what());
          }
          j.push(DoneEvent{});
        },
        deadline);
    ProbeGuard guard{job};
    ctx.scheduler.submit(job);
    await_done(*job);
    if (outcome->vectors.size() != r.inputs.size()) throw HttpError(499, "client closed the request");

    ordered_json data = ordered_json::array();
    size_t tokens = 0;
    for (size_t i = 0; i < r.inputs.size(); ++i) {
      tokens += r.inputs[i].size();
      ordered_json item = {{"object", "embedding"}, {"index", i}};
      if (r.base64)
        item["embedding"] = generate::floats_base64(outcome->vectors[i]);
      else
        item["embedding"] = outcome->vectors[i];
      data.push_back(std::move(item));
    }
    ordered_json out = {{"object", "list"},
                        {"data", std::move(data)},
                        {"model", r.model},
                        {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
    res.status = 200;
    res.set_content(python_dumps(out), "application/json");
  } catch (const HttpError& e) {
    ctx.log.debug(std::string("rejected embeddings request: ") + e.what());
    reply_error(e.status(), e.what(), e.param());
  } catch (const UsageError& e) {
    reply_error(400, e.what());
  }
}

}  // namespace mlxrt::server
