// Port of ResponseGenerator._serve_single and stream_generate (mlx_lm/server.py, generate.py @
// mlx-lm 0.32.2) for one request at a time.
#include "mlxrt/server/generation.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <mlx/memory.h>
#include <mlx/ops.h>

#include "mlxrt/generate/generate_step.h"
#include "mlxrt/generate/mtp_speculative.h"
#include "mlxrt/structured/grammar_constraint.h"
#include "mlxrt/generate/logits_processors.h"
#include "mlxrt/generate/sampler.h"
#include "mlxrt/generate/speculative.h"
#include "mlxrt/model/nn/expert_store.h"
#include "mlxrt/server/completion_handler.h"
#include "mlxrt/server/http_error.h"

namespace mlxrt::server {

namespace {

namespace mx = mlx::core;

/** Thrown from the prefill progress hook to abandon a job whose client has gone. */
struct Abandoned {};

generate::SamplerParams sampler_params(const CompletionRequest& r) {
  generate::SamplerParams p;
  p.temp = r.temperature;
  p.top_p = r.top_p;
  p.min_p = r.min_p;
  p.top_k = r.top_k;
  p.xtc_probability = r.xtc_probability;
  p.xtc_threshold = r.xtc_threshold;
  return p;
}

generate::LogitsProcessorParams processor_params(const CompletionRequest& r) {
  generate::LogitsProcessorParams p;
  p.logit_bias = r.logit_bias;
  // mlx-lm adds a penalty processor only for a non-zero penalty.
  if (r.repetition_penalty != 0.0) p.repetition_penalty = r.repetition_penalty;
  if (r.presence_penalty != 0.0) p.presence_penalty = r.presence_penalty;
  if (r.frequency_penalty != 0.0) p.frequency_penalty = r.frequency_penalty;
  p.repetition_context_size = r.repetition_context_size;
  p.presence_context_size = r.presence_context_size;
  p.frequency_context_size = r.frequency_context_size;
  return p;
}

std::vector<TopToken> top_tokens(const mx::array& logprobs, int n, const tokenizer::Tokenizer& tok) {
  std::vector<TopToken> out;
  if (n <= 0) return out;
  for (const auto& t : generate::top_logprobs(logprobs, n)) out.push_back({t.id, tok.id_to_token(t.id), t.logprob});
  return out;
}

}  // namespace

Generator::Generator(std::shared_ptr<ModelSession> session, const ServerOptions& options, Logger& log,
                     ServerMetrics& metrics, std::shared_ptr<Lockstep> lockstep)
    : options_(options),
      log_(log),
      metrics_(metrics),
      cache_(static_cast<size_t>(std::max(0, options.prompt_cache_size)), options.prompt_cache_bytes),
      rng_(std::make_shared<generate::RandomState>()),
      lockstep_(std::move(lockstep)) {
  if (lockstep_) {
    // mlx_lm.server's _generate: every rank seeds its PRNG from the sum of their keys, so a
    // sampled request draws the same tokens on every rank.
    rng_->seed(lockstep_->summed_seed(rng_->key()));
    cache_.set_agreement([this](bool mine) { return lockstep_->agree(mine); });
  }
  use(session);
}

std::vector<int> Generator::stopping_jobs() const {
  std::vector<int32_t> uids;
  if (!lockstep_ || lockstep_->leader())
    for (const auto& [uid, b] : batch_)
      if (b.job->should_stop()) uids.push_back(uid);
  if (lockstep_) uids = lockstep_->share(uids);
  return {uids.begin(), uids.end()};
}

void Generator::use(const std::shared_ptr<ModelSession>& session) {
  if (!session || session == session_) return;
  session_ = session;
  stop_cache_.clear();
  grammar_.reset();
  newline_tokens_ = session_->tokenizer.encode("\n", true);
  unbatchable_ = session_->unbatchable;
  if (unbatchable_) log_.info("requests are served one at a time: " + *unbatchable_);
}

std::shared_ptr<const StopSequences> Generator::stop_sequences(const std::vector<std::string>& words) {
  auto it = stop_cache_.find(words);
  if (it != stop_cache_.end()) return it->second;
  std::vector<std::vector<int32_t>> seqs;
  for (int32_t id : session_->eos_token_ids) seqs.push_back({id});
  for (const auto& w : words) seqs.push_back(session_->tokenizer.encode(w, false));
  if (stop_cache_.size() > 100) stop_cache_.clear();  // as mlx-lm bounds its state-machine cache
  auto made = std::make_shared<const StopSequences>(seqs);
  stop_cache_.emplace(words, made);
  return made;
}

void Generator::run(Job& job) {
  use(job.session());
  const CompletionRequest& r = job.request();
  const std::vector<int32_t>& prompt = job.prompt().tokens;
  // --adapters: the request's adapter picks the model, and keys the prompt cache.
  const std::string adapter = requested_adapter(r, options_, *session_);
  auto& model = session_->model_for(adapter);

  if (r.seed) rng_->seed(static_cast<uint64_t>(*r.seed));
  generate::GenerateOptions go;
  go.max_tokens = r.max_tokens;
  go.prefill_step_size = options_.prefill_step_size;
  go.kv_bits = options_.kv_bits;
  go.kv_group_size = options_.kv_group_size;
  go.quantized_kv_start = options_.quantized_kv_start;
  try {
    auto sp = sampler_params(r);
    sp.xtc_special_tokens = newline_tokens_;
    sp.xtc_special_tokens.insert(sp.xtc_special_tokens.end(), session_->eos_token_ids.begin(),
                                 session_->eos_token_ids.end());
    go.sampler = generate::make_sampler(sp, rng_);
    go.logits_processors = generate::make_logits_processors(processor_params(r), model.vocab_size());
  } catch (const UsageError& e) {
    throw HttpError(400, e.what());
  }
  if (r.response_format != "text") {
    try {
      auto& grammar = grammar_engine(model.vocab_size());
      go.logits_processors.push_back(structured::constraint_processor(
          r.response_format == "json_object"
              ? grammar.json_object()
              : grammar.json_schema(r.json_schema, r.json_schema_strict, "response_format.json_schema.schema")));
    } catch (const UsageError& e) {
      throw HttpError(400, e.what(), "response_format");
    }
  }
  if (r.force_tool_call) force_tool_call(r, model.vocab_size(), go);

  auto hit = cache_.fetch(prompt, cache_key(adapter));
  const bool fresh = hit.cache.empty();
  cache::CacheList kv = fresh ? model.make_cache() : std::move(hit.cache);
  // With a draft model the cache holds the main model's layers, then the draft's (mlx-lm's
  // `cache += make_prompt_cache(draft_model)`).
  auto* draft = session_->draft_model.get();
  // --mtp: a cached entry carries the head's part after the main model's layers
  // (MtpTokenGenerator), so a request continues it with its drafting intact.
  const bool mtp = session_->loaded.model->multi_token_predictor() != nullptr;
  if (mtp && !go.logits_processors.empty())
    throw HttpError(400, "this server drafts with the model's multi-token-prediction head (--mtp), which runs no "
                         "logits processors (penalties, logit_bias, response_format)");
  if (draft && fresh)
    for (auto& c : draft->make_cache()) kv.push_back(std::move(c));
  job.push(StartedEvent{prompt.size(), hit.reused});
  using Seconds = std::chrono::duration<double>;
  auto last_event = Job::Clock::now();
  metrics_.job_started(prompt.size(), hit.reused, Seconds(last_event - job.queued_at()).count());
  size_t generated = 0, accepted = 0;
  std::vector<int32_t> rest(prompt.begin() + static_cast<long>(hit.reused), prompt.end());
  // mlx_lm.server serves a request alone (generate_step) when it has a seed, the server quantizes
  // its KV cache or drafts with a second model, and otherwise in its BatchGenerator, whose prompt progress starts after the first
  // chunk: there is no "0/N" report, so such streams do not start with ": keepalive 0/N".
  const bool batch_path = !r.seed && !options_.kv_bits && !draft && !mtp;
  go.prompt_progress = [&job, batch_path](int processed, int total) {
    if (job.stop_now()) throw Abandoned{};
    if (batch_path && processed == 0) return;
    job.push(ProgressEvent{processed, total});
  };

  std::vector<int32_t> key = prompt;
  try {
    // mlx-lm's speculative path takes no progress callback.
    if (draft || mtp) go.prompt_progress = nullptr;
    std::optional<generate::TokenGenerator> plain;
    std::optional<generate::SpeculativeTokenGenerator> speculative;
    std::optional<generate::MtpTokenGenerator> drafting_head;
    if (draft)
      speculative.emplace(model, *draft, rest, go, r.num_draft_tokens, &kv);
    else if (mtp)
      drafting_head.emplace(model, rest, go, r.num_draft_tokens, &kv);
    else
      plain.emplace(model, rest, go, &kv);
    auto detok = session_->tokenizer.streaming_detokenizer();
    auto matcher = StopSequences::matcher(stop_sequences(r.stop));
    const auto& eos = session_->eos_token_ids;
    for (int n = 0;; ++n) {
      if (job.stop_now()) break;
      auto step = plain ? plain->next() : drafting_head ? drafting_head->next() : speculative->next();
      if (!step) break;
      TokenEvent ev{"", step->token, 0.0f, std::nullopt, {}};
      if (std::find(eos.begin(), eos.end(), step->token) != eos.end()) {
        detok.finalize();
        ev.finish_reason = "stop";
      } else {
        detok.add_token(step->token);
        if (n + 1 == r.max_tokens) {
          detok.finalize();
          ev.finish_reason = "length";
        }
      }
      ev.text = detok.take_segment();
      if (matcher.advance(step->token)) ev.finish_reason = "stop";
      if (r.logprobs) ev.logprob = generate::token_logprob(step->logprobs, step->token);
      ev.top = top_tokens(step->logprobs, r.top_logprobs, session_->tokenizer);
      bool finished = ev.finish_reason.has_value();
      job.push(std::move(ev));
      const auto now = Job::Clock::now();
      if (generated++ == 0)
        metrics_.first_token(Seconds(now - job.queued_at()).count());
      else
        metrics_.next_token(Seconds(now - last_event).count());
      last_event = now;
      key.push_back(step->token);
      if (step->from_draft) ++accepted;
      if (finished) break;
    }
    if (speculative || drafting_head)
      metrics_.speculated(static_cast<size_t>(speculative ? speculative->drafted() : drafting_head->drafted()), accepted);
  } catch (const Abandoned&) {
    // The client left during prefill; what was computed still goes to the cache.
  }

  const int offset = kv.empty() ? 0 : kv.front()->offset();
  if (offset > 0 && static_cast<size_t>(offset) <= key.size()) {
    key.resize(static_cast<size_t>(offset));
    cache_.insert(std::move(key), std::move(kv), cache_key(adapter));
  }
  metrics_.job_finished(generated);
  metrics_.prompt_cache_state(cache_.nbytes(), cache_.size());
  job.push(DoneEvent{});
}

structured::GrammarEngine& Generator::grammar_engine(int vocab_size) {
  // The token table is built once, on the first constrained request.
  if (!grammar_) grammar_ = std::make_unique<structured::GrammarEngine>(session_->tokenizer, vocab_size, session_->eos_token_ids);
  return *grammar_;
}

// tool_choice "required" / a named function: the reply is masked to one call in the model's format.
// The format must be one whose call is a JSON object between two markers (json_tools: Qwen's and
// Hermes' templates); for the others the choice only narrows the tools the template shows.
void Generator::force_tool_call(const CompletionRequest& r, int vocab_size, generate::GenerateOptions& go) {
  if (r.response_format != "text")
    throw HttpError(400, "tool_choice that requires a tool call cannot be combined with response_format", "tool_choice");
  const auto& parser = session_->tool_parser;
  if (!parser || parser->type != "json_tools") {
    log_.warning("tool_choice is not enforced for this model's tool-call format (" +
                 (parser ? parser->type : std::string("none")) + "): the reply may be text");
    return;
  }
  try {
    go.logits_processors.push_back(
        structured::constraint_processor(grammar_engine(vocab_size).tool_call(parser->start, parser->end, r.tools, "tools")));
  } catch (const UsageError& e) {
    throw HttpError(400, e.what(), "tools");
  }
}

// --- continuous batching (mlx_lm.server's _generate batch path) ---

bool Generator::batchable(const Job& job) const {
  if (job.task()) return false;
  const ModelSession& session = session_of(job);
  if (session.unbatchable || job.request().seed || options_.kv_bits) return false;
  // Structured output masks each step with the request's own grammar state: it runs alone.
  if (job.request().response_format != "text" || job.request().force_tool_call) return false;
  // A request naming an unknown adapter runs alone, and gets its error there.
  try {
    requested_adapter(job.request(), options_, session);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// With --adapters, a batch runs the session's mixed-adapter model: each row computes with its own
// request's adapter (or none). Where the adapters cannot mix, one batch runs one model, the base
// model or one adapter's, as mlx_lm.server's batch runs the one model (and adapter) it loaded, and
// a request for another drains the batch, then opens its own.
bool Generator::batch_joinable(const Job& job) const {
  if (job.session() && job.session() != session_) return false;
  try {
    const std::string adapter = requested_adapter(job.request(), options_, *session_);
    return session_->mixed_model || adapter == batch_adapter_;
  } catch (const std::exception&) {
    return false;
  }
}

std::string Generator::join_prefill_mode() const {
  // Ranks in lockstep must take the same steps: a step cut short by a local arrival would not be.
  if (!options_.prompts_first || lockstep_) return "between";
  return options_.join_prefill_interleaved ? "interleaved" : options_.join_prefill_beside ? "beside" : "between";
}

void Generator::batch_open(const Job& job) {
  use(job.session());
  batch_adapter_ = requested_adapter(job.request(), options_, *session_);
  generate::BatchGeneratorOptions o;
  o.completion_batch_size = options_.decode_concurrency;
  o.prefill_batch_size = options_.prompt_concurrency;
  o.prefill_step_size = options_.prefill_step_size;
  o.batch_invariant = options_.batch_invariant;
  o.prompts_first = options_.prompts_first;
  o.prefill_buffer_cache_bytes = options_.prefill_buffer_cache_bytes;
  o.first_tokens_early = options_.first_tokens_early;
  const auto join = join_prefill_mode();
  o.join_prefill_beside = join != "between";
  o.join_prefill_interleaved = join == "interleaved";
  // The pieces' size and how many go ahead, for measuring other settings than the defaults.
  const auto positive_env = [](const char* name, int fallback) {
    const char* set = std::getenv(name);
    return set && std::atoi(set) > 0 ? std::atoi(set) : fallback;
  };
  o.step_piece_ops = positive_env("MLXRT_STEP_PIECE_OPS", o.step_piece_ops);
  o.step_pieces_ahead = positive_env("MLXRT_STEP_PIECES_AHEAD", o.step_pieces_ahead);
  o.step_pieces_ahead_on_return = positive_env("MLXRT_STEP_PIECES_AHEAD_ON_RETURN", o.step_pieces_ahead);
  o.sample_streams = sample_streams_for_this_thread();
  step_timing_ = {};
  if (log_.enabled(LogLevel::debug)) o.step_timing = &step_timing_;
  if (session_->mixed_model) {
    o.adapter_rows = session_->adapter_rows;
    batcher_ = std::make_unique<generate::BatchGenerator>(*session_->mixed_model, o);
  } else {
    batcher_ = std::make_unique<generate::BatchGenerator>(session_->model_for(batch_adapter_), o);
  }
}

std::vector<mx::Stream> Generator::sample_streams_for_this_thread() {
  if (mx::default_device() != mx::Device::cpu) return {};
  // MLX's streams belong to the thread that made them: made here, on the thread that steps the
  // batch (again if that thread changes; the old ones stay with their thread).
  if (sample_streams_thread_ != std::this_thread::get_id()) {
    sample_streams_ = generate::make_sample_streams();
    sample_streams_thread_ = std::this_thread::get_id();
  }
  return sample_streams_;
}

void Generator::batch_close() { batcher_.reset(); }

void Generator::batch_insert(const std::shared_ptr<Job>& job) {
  const CompletionRequest& r = job->request();
  const std::vector<int32_t>& prompt = job->prompt().tokens;
  const std::string adapter = session_->mixed_model ? requested_adapter(r, options_, *session_) : batch_adapter_;
  auto& model = session_->model_for(adapter);
  generate::BatchRequest req;
  if (!adapter.empty() && session_->mixed_model) req.adapter_slot = session_->adapter_slots.at(adapter);
  try {
    auto sp = sampler_params(r);
    sp.xtc_special_tokens = newline_tokens_;
    sp.xtc_special_tokens.insert(sp.xtc_special_tokens.end(), session_->eos_token_ids.begin(),
                                 session_->eos_token_ids.end());
    req.sampler = std::make_shared<const generate::Sampler>(generate::make_sampler(sp, rng_));
    req.greedy_sampler = sp.temp == 0;
    const auto processors = processor_params(r);
    req.logits_processors = generate::make_logits_processors(processors, model.vocab_size());
    req.logit_bias_only = generate::logit_bias_only(processors);
    model::check_token_ids(model, prompt);
  } catch (const UsageError& e) {
    job->push(ErrorEvent{400, e.what()});
    return;
  }
  req.stop_sequences = generate::make_stop_sequences(session_->tokenizer, session_->eos_token_ids, r.stop);
  req.max_tokens = r.max_tokens;

  auto hit = cache_.fetch(prompt, cache_key(adapter));
  req.prompt.assign(prompt.begin() + static_cast<long>(hit.reused), prompt.end());
  req.all_tokens.assign(prompt.begin(), prompt.begin() + static_cast<long>(hit.reused));
  req.cache = std::move(hit.cache);
  std::vector<generate::BatchRequest> one;
  one.push_back(std::move(req));
  int uid = 0;
  try {
    uid = batcher_->insert(std::move(one)).front();
  } catch (const UsageError& e) {
    job->push(ErrorEvent{400, e.what()});
    return;
  }
  job->push(StartedEvent{prompt.size(), hit.reused});
  const auto now = Job::Clock::now();
  metrics_.job_started(prompt.size(), hit.reused, std::chrono::duration<double>(now - job->queued_at()).count());
  if (std::any_of(batch_.begin(), batch_.end(), [&](const auto& b) { return b.second.adapter != adapter; }))
    metrics_.mixed_adapter_join();
  batch_.emplace(uid, BatchJob{job, session_->tokenizer.streaming_detokenizer(), 0, now, adapter, now});
}

void Generator::batch_serve(const std::function<bool()>& arrived) {
  using Seconds = std::chrono::duration<double>;
  std::vector<int> to_remove;
  const auto start = std::chrono::steady_clock::now();
  // mlx_lm.server steps for up to half a second before it looks at its queue again, so a request
  // that comes in just after the batch started waits that long for its prefill (8 clients at once:
  // 0.5 s to first token, as long as a whole short answer). Here the budget also ends, after at
  // least one step, when a request is waiting: it joins the batch at the next step.
  // Where a budget's time went, for --log-level DEBUG: in the batch generator, or in handing its
  // tokens to the requests.
  Seconds in_next{0}, in_events{0};
  int steps = 0;
  const generate::StepTiming timing_before = step_timing_;
  batcher_->set_interrupt(arrived);
  size_t tokens = 0;
  for (bool first = true;; first = false) {
    bool go_on = Seconds(std::chrono::steady_clock::now() - start).count() <= 0.5 && (first || !arrived || !arrived());
    if (lockstep_) go_on = lockstep_->agree(go_on);
    if (!go_on) break;
    const auto before_next = std::chrono::steady_clock::now();
    auto [prompt_responses, gen_responses] = batcher_->next();
    const auto after_next = std::chrono::steady_clock::now();
    in_next += after_next - before_next;
    if (prompt_responses.empty() && gen_responses.empty()) break;
    ++steps;
    // A step that prefilled, or any slow one: what it took and MLX's memory, so that time to first
    // token under load can be read from the log (prompts wait for these steps).
    const bool slow = after_next - before_next > std::chrono::milliseconds(100);
    if ((!prompt_responses.empty() || slow) && log_.enabled(LogLevel::debug)) {
      int processed = 0, total = 0;
      for (const auto& p : prompt_responses) processed += p.processed, total += p.total;
      char line[200];
      std::snprintf(line, sizeof(line),
                    "batch step: %zu prompts at %d of %d tokens, %zu tokens generated, %.2f ms in the generator",
                    prompt_responses.size(), processed, total, gen_responses.size(),
                    1e3 * Seconds(after_next - before_next).count());
      char memory[120];
      std::snprintf(memory, sizeof(memory), "; MLX memory GB: active %.2f, cache %.2f, peak %.2f",
                    mx::get_active_memory() / 1e9, mx::get_cache_memory() / 1e9, mx::get_peak_memory() / 1e9);
      log_.debug(std::string(line) + " (" + batcher_->describe_last_split() + memory + ")");
    }
    tokens += gen_responses.size();
    const std::vector<int> stopping = stopping_jobs();
    auto stops = [&](int uid) { return std::find(stopping.begin(), stopping.end(), uid) != stopping.end(); };
    for (const auto& p : prompt_responses) {
      auto it = batch_.find(p.uid);
      if (it == batch_.end()) continue;
      it->second.job->push(ProgressEvent{p.processed, p.total});
      if (stops(p.uid)) to_remove.push_back(p.uid);
    }
    for (auto& g : gen_responses) {
      auto it = batch_.find(g.uid);
      if (it == batch_.end()) continue;
      auto& b = it->second;
      const CompletionRequest& r = b.job->request();
      // Don't decode the final stop token
      TokenEvent ev{"", g.token, 0.0f, g.finish_reason, {}};
      if (g.finish_reason == std::optional<std::string>("stop")) {
        b.detok.finalize();
      } else {
        b.detok.add_token(g.token);
        if (g.finish_reason) b.detok.finalize();
      }
      ev.text = b.detok.take_segment();
      if (r.logprobs) ev.logprob = generate::token_logprob(g.logprobs, g.token);
      ev.top = top_tokens(g.logprobs, r.top_logprobs, session_->tokenizer);
      b.job->push(std::move(ev));
      const auto now = Job::Clock::now();
      if (b.generated++ == 0) {
        metrics_.first_token(Seconds(now - b.job->queued_at()).count());
        if (log_.enabled(LogLevel::debug)) {
          char line[160];
          std::snprintf(line, sizeof(line), "first token of request %d: %.2f ms after it was queued (%.2f waiting to join, %.2f in the batch)",
                        g.uid, 1e3 * Seconds(now - b.job->queued_at()).count(),
                        1e3 * Seconds(b.inserted - b.job->queued_at()).count(), 1e3 * Seconds(now - b.inserted).count());
          log_.debug(line);
        }
      } else {
        metrics_.next_token(Seconds(now - b.last_event).count());
      }
      b.last_event = now;
      if (g.finish_reason) {
        cache_.insert(std::move(g.all_tokens), std::move(g.prompt_cache), cache_key(b.adapter));
        metrics_.job_finished(b.generated);
        metrics_.prompt_cache_state(cache_.nbytes(), cache_.size());
        b.job->push(DoneEvent{});
        batch_.erase(it);
        // Streamed experts: the cache's totals so far, after each request (as the one-at-a-time path logs).
        if (session_->experts) log_.info(model::nn::format_expert_stats(session_->experts->stats()));
        continue;
      }
      if (stops(g.uid)) to_remove.push_back(g.uid);
    }
    in_events += std::chrono::steady_clock::now() - after_next;
  }
  if (steps > 0 && log_.enabled(LogLevel::debug)) {
    char line[300];
    int n = std::snprintf(line, sizeof(line), "batch: %d steps, %zu tokens, %.2f ms/step in the generator, %.2f ms/step handing out tokens",
                          steps, tokens, 1e3 * in_next.count() / steps, 1e3 * in_events.count() / steps);
    // The decoding steps that read a step dispatched before them: the host's share and the wait.
    const int timed = step_timing_.steps - timing_before.steps;
    if (timed > 0 && n > 0 && n < static_cast<int>(sizeof(line)))
      std::snprintf(line + n, sizeof(line) - n, "; %d decoding steps: build %.2f, dispatch %.2f, wait %.2f ms/step", timed,
                    1e3 * (step_timing_.build_s - timing_before.build_s) / timed,
                    1e3 * (step_timing_.dispatch_s - timing_before.dispatch_s) / timed,
                    1e3 * (step_timing_.wait_s - timing_before.wait_s) / timed);
    log_.debug(line);
  }
  if (!to_remove.empty()) {
    batcher_->remove(to_remove);
    for (int uid : to_remove) {
      auto it = batch_.find(uid);
      if (it == batch_.end()) continue;
      metrics_.job_finished(it->second.generated);
      it->second.job->push(DoneEvent{});
      batch_.erase(it);
    }
  }
}

void Generator::batch_fail(int status, const std::string& message) {
  for (auto& [uid, b] : batch_) {
    metrics_.job_finished(b.generated);
    b.job->push(ErrorEvent{status, message});
  }
  batch_.clear();
  batcher_.reset();
}

}  // namespace mlxrt::server
