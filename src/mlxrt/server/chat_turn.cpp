// One chat turn for the Anthropic and Responses APIs: the chat completions path's job handling and
// output splitting (completion_handler.cpp, completion_assembler.cpp), with the output as deltas.
#include "mlxrt/server/chat_turn.h"

#include <httplib.h>

#include <algorithm>

#include "mlxrt/server/completion_handler.h"
#include "mlxrt/server/connection_probe.h"
#include "mlxrt/server/http_error.h"
#include "mlxrt/server/prompt_builder.h"
#include "mlxrt/server/python_json.h"

namespace mlxrt::server {

namespace {

using json = nlohmann::ordered_json;
using namespace std::chrono_literals;

/** The assembler runs in streaming mode whatever the API asked: its chunks are the deltas. */
CompletionRequest streaming_copy(const CompletionRequest& r) {
  CompletionRequest c = r;
  c.stream = true;
  c.include_usage = false;
  c.logprobs = false;
  c.top_logprobs = -1;
  return c;
}

ResponseMeta chunk_meta(const CompletionRequest& r) { return make_response_meta(Endpoint::chat, true, r.model, ""); }

}  // namespace

ChatTurn::ChatTurn(const CompletionRequest& request, const ModelSession& session, const std::string& initial_state)
    : session_(session),
      stop_words_(request.stop),
      assembler_(chunk_meta(request), streaming_copy(request), make_text_state_machine(session.markers, request.stop),
                 initial_state, session.tool_parser ? &*session.tool_parser : nullptr) {}

TurnDelta ChatTurn::take(const json& chunk) {
  TurnDelta d;
  const json& choices = chunk.at("choices");
  if (choices.empty()) return d;
  const json& delta = choices.front().at("delta");
  if (auto it = delta.find("reasoning"); it != delta.end() && it->is_string()) d.reasoning = it->get<std::string>();
  if (auto it = delta.find("content"); it != delta.end() && it->is_string()) d.text = it->get<std::string>();
  if (auto it = delta.find("tool_calls"); it != delta.end() && it->is_array()) {
    for (const auto& call : *it) {
      const json& fn = call.at("function");
      TurnToolCall tc;
      tc.id = call.at("id").is_string() ? call.at("id").get<std::string>() : python_dumps(call.at("id"));
      tc.name = fn.contains("name") && fn["name"].is_string() ? fn["name"].get<std::string>() : std::string();
      tc.arguments = fn.at("arguments").get<std::string>();
      d.tool_calls.push_back(std::move(tc));
    }
  }
  result_.reasoning += d.reasoning;
  result_.text += d.text;
  result_.tool_calls.insert(result_.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  return d;
}

TurnDelta ChatTurn::add(const TokenEvent& event) {
  tokens_.push_back(event.token);
  if (event.finish_reason) {
    finish_reason_ = event.finish_reason;
    if (*event.finish_reason == "stop") {
      const auto& eos = session_.eos_token_ids;
      if (std::find(eos.begin(), eos.end(), event.token) == eos.end()) {
        // Not an end token: a stop word's tokens have just completed (generation.cpp matches the
        // stop words' encodings); name the one that ends the output.
        for (const auto& w : stop_words_) {
          auto ids = session_.tokenizer.encode(w, false);
          if (!ids.empty() && ids.size() <= tokens_.size() &&
              std::equal(ids.rbegin(), ids.rend(), tokens_.rbegin())) {
            if (!result_.stop_sequence || result_.stop_sequence->size() < w.size()) result_.stop_sequence = w;
          }
        }
      }
    }
  }
  auto chunk = assembler_.add(event);
  return chunk ? take(*chunk) : TurnDelta{};
}

TurnDelta ChatTurn::finish() {
  TurnDelta d;
  for (const auto& chunk : assembler_.finish_stream(Usage{})) {
    TurnDelta part = take(chunk);
    d.reasoning += part.reasoning;
    d.text += part.text;
    d.tool_calls.insert(d.tool_calls.end(), part.tool_calls.begin(), part.tool_calls.end());
  }
  result_.output_tokens = tokens_.size();
  if (!result_.reasoning.empty()) result_.reasoning_tokens = session_.tokenizer.encode(result_.reasoning, false).size();
  if (!result_.tool_calls.empty() && finish_reason_ != "length")
    result_.end = TurnEnd::tool_use;
  else if (finish_reason_ == "length")
    result_.end = TurnEnd::max_tokens;
  else if (result_.stop_sequence)
    result_.end = TurnEnd::stop_sequence;
  else
    result_.end = TurnEnd::end_turn;
  if (result_.end != TurnEnd::stop_sequence) result_.stop_sequence.reset();
  return d;
}

void reply_api_error(httplib::Response& res, const TurnRenderer& renderer, int status, const std::string& message,
                     const std::string& param) {
  res.status = status;
  res.set_content(python_dumps(renderer.error_body(status, message, param)), "application/json");
}

namespace {

/** Waits for the job's StartedEvent; false after writing the error reply. */
bool await_start(Job& job, httplib::Response& res, const TurnRenderer& renderer, StartedEvent& started) {
  for (;;) {
    auto ev = job.pop(50ms);
    if (!ev) {
      if (job.should_stop()) {
        reply_api_error(res, renderer, job.timed_out() ? 504 : 499,
                        job.timed_out() ? "request timed out" : "client closed the request");
        return false;
      }
      continue;
    }
    if (auto* e = std::get_if<ErrorEvent>(&*ev)) {
      reply_api_error(res, renderer, e->status, e->message);
      return false;
    }
    if (auto* s = std::get_if<StartedEvent>(&*ev)) {
      started = *s;
      return true;
    }
  }
}

void serve_whole(std::shared_ptr<Job> job, std::shared_ptr<ChatTurn> turn, std::shared_ptr<TurnRenderer> renderer,
                 httplib::Response& res) {
  for (;;) {
    auto ev = job->pop(50ms);
    if (!ev) {
      job->should_stop();  // notices a vanished client or the deadline while the queue is quiet
      continue;
    }
    if (auto* t = std::get_if<TokenEvent>(&*ev)) {
      turn->add(*t);
    } else if (auto* e = std::get_if<ErrorEvent>(&*ev)) {
      reply_api_error(res, *renderer, e->status, e->message);
      return;
    } else if (std::holds_alternative<DoneEvent>(*ev)) {
      break;
    }
  }
  if (job->timed_out()) return reply_api_error(res, *renderer, 504, "request timed out");
  if (job->cancelled()) return reply_api_error(res, *renderer, 503, "the server is shutting down");
  turn->finish();
  res.status = 200;
  res.set_content(python_dumps(renderer->whole(turn->result())), "application/json");
}

void serve_stream(std::shared_ptr<Job> job, std::shared_ptr<ChatTurn> turn, std::shared_ptr<TurnRenderer> renderer,
                  httplib::Response& res) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  auto begun = std::make_shared<bool>(false);
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, turn, renderer, begun](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) {
          if (s.empty() || sink.write(s.data(), s.size())) return true;
          job->cancel();  // the client is gone: stop generating
          return false;
        };
        if (!*begun) {
          *begun = true;
          if (!write(renderer->stream_begin(turn->result()))) return false;
        }
        for (;;) {
          auto ev = job->pop(50ms);
          if (!ev) {
            if (job->should_stop() && job->cancelled()) return false;
            continue;
          }
          if (auto* p = std::get_if<ProgressEvent>(&*ev)) {
            if (!write(renderer->stream_keepalive(p->processed, p->total))) return false;
          } else if (auto* t = std::get_if<TokenEvent>(&*ev)) {
            TurnDelta d = turn->add(*t);
            if (!d.empty() && !write(renderer->stream_delta(d))) return false;
          } else if (auto* e = std::get_if<ErrorEvent>(&*ev)) {
            write(renderer->stream_error(e->status, e->message));
            sink.done();
            return true;
          } else if (std::holds_alternative<DoneEvent>(*ev)) {
            if (job->timed_out() || job->cancelled()) {
              write(job->timed_out() ? renderer->stream_error(504, "request timed out")
                                     : renderer->stream_error(503, "the server is shutting down"));
              sink.done();
              return true;
            }
            TurnDelta last = turn->finish();
            if (!write(renderer->stream_end(last, turn->result()))) return false;
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

void serve_turn(const ApiContext& ctx, const httplib::Request& req, httplib::Response& res, CompletionRequest request,
                std::shared_ptr<TurnRenderer> renderer) {
  std::shared_ptr<Job> job;
  std::shared_ptr<ModelSession> held;
  try {
    const auto deadline = Job::deadline_after(ctx.options.request_timeout_s);
    held = ctx.models.acquire(request.model, ctx.scheduler, deadline);
    check_model(request, ctx.options, *held);
    PreparedPrompt prompt = build_prompt(request, *held, ctx.options);
    check_prompt_length(request, prompt, ctx.options, *held, ctx.log);
    job = std::make_shared<Job>(request, std::move(prompt), deadline);
    job->set_session(held);
  } catch (const HttpError& e) {
    ctx.log.debug(std::string("rejected request: ") + e.what());
    return reply_api_error(res, *renderer, e.status(), e.what(), e.param());
  } catch (const UsageError& e) {
    return reply_api_error(res, *renderer, 400, e.what());
  }

  auto probe = std::make_shared<ConnectionProbe>(req.remote_addr, req.remote_port, req.local_port);
  job->set_probe([probe] { return probe->client_gone(); });
  ProbeGuard guard{job};
  try {
    ctx.scheduler.submit(job);
  } catch (const HttpError& e) {
    return reply_api_error(res, *renderer, e.status(), e.what());
  }
  StartedEvent started{};
  if (!await_start(*job, res, *renderer, started)) return;

  // The turn reads the job's model, which the job holds as long as the turn lives.
  auto turn = std::make_shared<ChatTurn>(request, *held, job->prompt().initial_state);
  turn->result().prompt_tokens = started.prompt_tokens;
  turn->result().cached_tokens = started.cached_tokens;
  if (request.stream) {
    serve_stream(job, turn, renderer, res);
    guard.job.reset();  // the stream's releaser takes over
  } else {
    serve_whole(job, turn, renderer, res);
  }
}

size_t count_prompt_tokens(const ApiContext& ctx, const CompletionRequest& request) {
  auto held = ctx.models.acquire(request.model, ctx.scheduler, Job::deadline_after(ctx.options.request_timeout_s));
  check_model(request, ctx.options, *held);
  return build_prompt(request, *held, ctx.options).tokens.size();
}

}  // namespace mlxrt::server
