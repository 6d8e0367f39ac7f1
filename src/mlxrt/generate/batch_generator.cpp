// Port of BatchGenerator, PromptProcessingBatch and GenerationBatch in mlx_lm/generate.py
// (mlx-lm 0.32.2).
#include "mlxrt/generate/batch_generator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>

#include <mlx/memory.h>
#include <mlx/ops.h>
#include <mlx/transforms.h>
#include <mlx/utils.h>

#include "mlxrt/cache/kv_cache.h"
#include "mlxrt/generate/batch_rows.h"
#include "mlxrt/kernels/cpu/logsumexp.h"
#include "mlxrt/model/adapter_slot_model.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::generate {

namespace {

cache::BatchCache& batch_cache(const std::unique_ptr<cache::Cache>& c) {
  return static_cast<cache::BatchCache&>(*c);
}

void eval_state(const model::CacheList& caches) { mx::eval(cache::state_arrays(caches)); }

using batch_rows::Clock;
using batch_rows::ms_since;
using batch_rows::pick;

bool distinct_ids(const std::vector<std::pair<int32_t, double>>& bias) {
  std::set<int32_t> ids;
  for (const auto& [id, value] : bias)
    if (!ids.insert(id).second) return false;
  return true;
}

mx::array int_array(const std::vector<int>& v) {
  return mx::array(v.data(), {static_cast<int>(v.size())}, mx::int32);
}

// a[e : e + 1] of a [B, ...] array
mx::array row(const mx::array& a, int e) {
  mx::Shape lo(a.ndim(), 0), hi = a.shape();
  lo[0] = e;
  hi[0] = e + 1;
  return mx::slice(a, lo, hi);
}

}  // namespace

/** The values of an int32 or uint32 vector (a step's sampled tokens: argmax and the categorical
 * draw give uint32) read as they are. Through mx::astype they would be a new node, queued behind
 * the step just dispatched: reading it would wait for that whole step, and the host would build
 * the next step's graph with the device idle instead of while it computes (mlx-lm reads them with
 * tolist()). Other dtypes, and a strided view, are converted first. */
std::vector<int32_t> BatchGenerator::token_values(const mx::array& a) {
  mx::eval(a);
  if (a.flags().row_contiguous && a.dtype() == mx::int32) {
    const int32_t* p = a.data<int32_t>();
    return std::vector<int32_t>(p, p + a.size());
  }
  if (a.flags().row_contiguous && a.dtype() == mx::uint32) {
    const uint32_t* p = a.data<uint32_t>();
    std::vector<int32_t> out(a.size());
    std::transform(p, p + a.size(), out.begin(), [](uint32_t v) { return static_cast<int32_t>(v); });
    return out;
  }
  auto c = mx::astype(a, mx::int32);
  mx::eval(c);
  const int32_t* p = c.data<int32_t>();
  return std::vector<int32_t>(p, p + c.size());
}

std::optional<std::string> batching_unsupported_reason(const model::CausalLM& model) {
  auto caches = model.make_cache();
  for (const auto& c : caches)
    if (!cache::BatchCache::batches(*c))
      return std::string("this model's layers keep a cache other than a KVCache or RotatingKVCache, which mlxrt "
                         "does not batch yet");
  // Build (without evaluating) one batched step of three rows: a model whose attention reads a
  // single position offset, builds its mask from one, or whose ops cannot take a batched mask
  // (shapes are checked as the graph is built) refuses here.
  model::CacheList batch;
  for (const auto& c : caches) batch.push_back(cache::BatchCache::empty_like(*c, {0, 1, 0}));
  try {
    auto probe = mx::zeros({3, 2}, mx::int32);
    const_cast<model::CausalLM&>(model)(probe, &batch);
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

BatchGenerator::BatchGenerator(model::CausalLM& model, BatchGeneratorOptions options)
    : model_(model), o_(std::move(options)), default_stop_(o_.stop_tokens) {
  if (o_.prefill_step_size <= 0) throw UsageError("--prefill-step-size must be positive");
  if (o_.prefill_batch_size <= 0) throw UsageError("--prompt-concurrency must be positive");
  if (o_.completion_batch_size <= 0) throw UsageError("--decode-concurrency must be positive");
  o_.completion_batch_size = std::max(o_.completion_batch_size, o_.prefill_batch_size);
  fallback_ = o_.sampler ? o_.sampler : std::make_shared<const Sampler>(greedy_sample);
  if (o_.adapter_rows) o_.adapter_rows->set_uniform(0);
  if (auto why = batching_unsupported_reason(model_)) throw UnsupportedError("batched generation: " + *why);
  if (o_.join_prefill_interleaved) {
    if (!o_.join_prefill_beside) throw UsageError("interleaved joining is a mode of joining beside (join_prefill_beside)");
    // On the CPU the host dispatching a piece is held until all but about ten of its ops have run
    // (MLX's cap on the tasks in flight), and it notices a joining request only between pieces:
    // small pieces there (bench/RESULTS.md, thirtieth session). On an H100 128-op pieces kept the
    // tail of 48-op ones at less of the throughput (thirty-second session).
    const int piece_ops = o_.step_piece_ops > 0 ? o_.step_piece_ops : mx::default_device() == mx::Device::cpu ? 16 : 128;
    paced_.emplace(piece_ops, o_.step_pieces_ahead);
  }
}

BatchGenerator::~BatchGenerator() {
  try {
    if (prompt_stream_) mx::synchronize(*prompt_stream_);
    mx::synchronize();
  } catch (...) {
    // A failed step was reported to whoever evaluated it; nothing is left to wait for.
  }
}

std::vector<int> BatchGenerator::insert(std::vector<BatchRequest> requests) {
  std::deque<Pending> pending;
  std::vector<int> uids;
  int uid = uid_count_;
  for (auto& r : requests) {
    std::deque<std::vector<int32_t>> seq;
    if (!r.prompt.empty()) seq.push_back(r.prompt);
    if (seq.empty()) throw UsageError("Sequence " + std::to_string(uid) + " has an empty prompt.");
    const int m = r.max_tokens.value_or(o_.max_tokens);
    if (m <= 0) throw UsageError("Sequence " + std::to_string(uid) + "'s max_tokens must be > 0.");
    model::check_token_ids(model_, r.prompt);
    if (seq.back().size() != 1) {
      std::vector<int32_t> last = {seq.back().back()};
      seq.back().pop_back();
      seq.push_back(last);
    }
    model::CacheList c = r.cache.empty() ? model_.make_cache() : std::move(r.cache);
    for (const auto& layer : c)
      if (!cache::BatchCache::batches(*layer))
        throw UnsupportedError("batched generation: a prompt cache of another kind than KVCache or RotatingKVCache "
                               "cannot join a batch");
    // A bias naming an id twice adds twice, in an order a batched add need not keep: per row.
    if (r.logit_bias_only && !distinct_ids(*r.logit_bias_only)) r.logit_bias_only.reset();
    Row row{std::move(r.all_tokens), r.sampler, std::move(r.logits_processors),
            r.stop_sequences ? *r.stop_sequences : default_stop_, m,
            r.sampler ? r.greedy_sampler : !o_.sampler, std::move(r.logit_bias_only), r.adapter_slot};
    if (r.adapter_slot != 0 && !o_.adapter_rows)
      throw UsageError("Sequence " + std::to_string(uid) + " names adapter slot " + std::to_string(r.adapter_slot) +
                       " but the batch's model is not a mixed-adapter model");
    pending.push_back(Pending{uid, std::move(seq), std::move(row), std::move(c)});
    uids.push_back(uid++);
  }
  for (auto& p : pending) unprocessed_.push_back(std::move(p));
  uid_count_ = uid;
  return uids;
}

size_t BatchGenerator::size() const {
  return unprocessed_.size() + prompt_.uids.size() + gen_.uids.size() + solo_.size() + joining_rows();
}

void BatchGenerator::route(const std::vector<Row>& rows) const {
  if (!o_.adapter_rows) return;
  std::vector<int> slots;
  for (const auto& r : rows) slots.push_back(r.adapter_slot);
  o_.adapter_rows->set(slots);
}

BatchGenerator::PromptBatch BatchGenerator::make_batch(int n, std::vector<Processing>& processing) {
  PromptBatch b;
  std::vector<model::CacheList> caches;
  for (int k = 0; k < n; ++k) {
    Pending p = std::move(unprocessed_.front());
    unprocessed_.pop_front();
    int total = 0;
    for (const auto& s : p.segments) total += static_cast<int>(s.size());
    b.uids.push_back(p.uid);
    b.rows.push_back(std::move(p.row));
    caches.push_back(std::move(p.cache));
    processing.push_back(Processing{std::move(p.segments), 0, total});
  }
  std::vector<const model::CacheList*> rows;
  for (const auto& c : caches) rows.push_back(&c);
  b.cache = cache::BatchCache::merge_rows(rows);
  return b;
}

void BatchGenerator::prompt(PromptBatch& batch, const std::vector<std::vector<int32_t>>& tokens, PrefillWait wait) {
  if (batch.uids.size() != tokens.size()) throw UsageError("The batch length doesn't match the number of inputs");
  if (tokens.empty()) return;
  for (size_t i = 0; i < tokens.size(); ++i)
    batch.rows[i].tokens.insert(batch.rows[i].tokens.end(), tokens[i].begin(), tokens[i].end());
  std::vector<int> lengths, padding;
  for (const auto& t : tokens) lengths.push_back(static_cast<int>(t.size()));
  const int max_length = *std::max_element(lengths.begin(), lengths.end());
  for (int l : lengths) padding.push_back(max_length - l);
  const int max_padding = *std::max_element(padding.begin(), padding.end());
  const int B = static_cast<int>(tokens.size());
  std::vector<int32_t> flat;
  flat.reserve(static_cast<size_t>(B) * max_length);
  for (const auto& t : tokens) {
    flat.insert(flat.end(), t.begin(), t.end());
    flat.insert(flat.end(), static_cast<size_t>(max_length) - t.size(), 0);
  }
  mx::array input(flat.data(), {B, max_length}, mx::int32);
  if (max_padding > 0)
    for (auto& c : batch.cache) batch_cache(c).prepare(std::nullopt, lengths, padding);
  // mlx-lm waits for every chunk and clears MLX's buffer cache. A chunk after which every row
  // only has its last token left is only dispatched (wait false): the rows' first step is then
  // encoded while the device still runs it, and the buffer cache is cleared after their first
  // tokens are handed out. Same kernels in the same order.
  auto settle = [&](bool last) {
    if (wait == PrefillWait::none) {
      mx::async_eval(cache::state_arrays(batch.cache));
    } else if (wait == PrefillWait::every_chunk || !last) {
      const auto t0 = Clock::now();
      eval_state(batch.cache);
      split_.prefill_wait_ms += ms_since(t0);
      if (buffer_cache_over_limit()) mx::clear_cache();
    } else {
      const auto t0 = Clock::now();
      mx::async_eval(cache::state_arrays(batch.cache));
      split_.prefill_dispatch_ms += ms_since(t0);
      clear_cache_pending_ = buffer_cache_over_limit();
    }
  };
  while (input.shape(1) > 0) {
    const int n = std::min(o_.prefill_step_size, input.shape(1));
    route(batch.rows);
    const auto t0 = Clock::now();
    model_(mx::slice(input, {0, 0}, {B, n}), &batch.cache);
    split_.prefill_build_ms += ms_since(t0);
    input = mx::slice(input, {0, n}, {B, input.shape(1)});
    const bool last = input.shape(1) == 0;
    if (!(last && max_padding > 0 && wait != PrefillWait::every_chunk)) settle(last);  // else the roll below is dispatched with it
  }
  if (max_padding > 0) {
    for (auto& c : batch.cache) batch_cache(c).finalize();
    settle(true);
  }
}

bool BatchGenerator::buffer_cache_over_limit() const {
  return o_.prefill_buffer_cache_bytes == 0 || mx::get_cache_memory() > o_.prefill_buffer_cache_bytes;
}

void BatchGenerator::filter_prompt(PromptBatch& b, const std::vector<int>& keep) {
  b.uids = pick(b.uids, keep);
  if (keep.empty()) {
    b.cache.clear();
  } else {
    for (auto& c : b.cache) batch_cache(c).filter(keep);
  }
  b.rows = pick(b.rows, keep);
}

BatchGenerator::GenBatch BatchGenerator::start_generation(PromptBatch batch, const std::vector<int32_t>& last_inputs) {
  GenBatch g;
  g.uids = std::move(batch.uids);
  g.cache = std::move(batch.cache);
  g.rows = std::move(batch.rows);
  g.next_tokens = mx::array(last_inputs.data(), {static_cast<int>(last_inputs.size())}, mx::int32);
  for (const auto& r : g.rows) {
    g.token_context.push_back(mx::array(r.tokens.data(), {static_cast<int>(r.tokens.size())}, mx::int32));
    g.num_tokens.push_back(0);
    g.matchers.push_back(r.stop.matcher());
    g.ahead.push_back(0);
  }
  if (!g.uids.empty()) step(g);
  return g;
}

mx::array BatchGenerator::process_logits(GenBatch& g, const mx::array& inputs, mx::array logits,
                                         std::vector<mx::array>& token_context) const {
  const int B = static_cast<int>(g.uids.size());
  bool any_processors = false;
  for (const auto& r : g.rows) any_processors = any_processors || !r.processors.empty();
  if (!any_processors) return logits;
  // Every row adds the same bias columns and nothing else: one add over the batch (what each row's
  // own processor would add to its row). The bias reads no token context, so none is kept.
  const auto& bias = g.rows.front().logit_bias_only;
  if (bias && std::all_of(g.rows.begin(), g.rows.end(), [&](const Row& r) { return r.logit_bias_only == bias; }))
    return g.rows.front().processors.front()(mx::array(0), logits);
  std::vector<mx::array> processed;
  for (int e = 0; e < B; ++e) {
    auto sample_logits = row(logits, e);
    const auto& processors = g.rows[e].processors;
    if (!processors.empty()) {
      auto context = mx::concatenate({*g.token_context[e], mx::astype(row(inputs, e), mx::int32)}, 0);
      g.token_context[e] = context;
      token_context.push_back(context);
      for (const auto& processor : processors) sample_logits = processor(context, sample_logits);
    }
    processed.push_back(sample_logits);
  }
  return mx::concatenate(processed, 0);
}

std::vector<mx::Stream> make_sample_streams() {
  std::vector<mx::Stream> streams;
  if (mx::default_device() != mx::Device::cpu) return streams;
  for (unsigned i = 1; i < std::min(std::thread::hardware_concurrency(), 4u); ++i)
    streams.push_back(mx::new_stream(mx::Device::cpu));
  return streams;
}

mx::array BatchGenerator::sample(const GenBatch& g, const mx::array& logprobs) const {
  std::vector<const Sampler*> samplers;
  for (const auto& r : g.rows) samplers.push_back(r.sampler ? r.sampler.get() : fallback_.get());
  const bool shared = std::all_of(samplers.begin(), samplers.end(), [&](const Sampler* s) { return s == samplers[0]; });
  if (shared) return (*samplers[0])(logprobs);
  // Rows that all take the argmax: one argmax over the batch picks what each row's own would.
  if (std::all_of(g.rows.begin(), g.rows.end(), [](const Row& r) { return r.greedy; })) return greedy_sample(logprobs);
  std::vector<mx::array> parts;
  const auto& streams = o_.sample_streams;
  const bool spread = !streams.empty() && mx::default_device() == mx::Device::cpu;
  for (int e = 0; e < static_cast<int>(g.uids.size()); ++e) {
    const size_t lane = spread ? static_cast<size_t>(e) % (streams.size() + 1) : 0;
    if (lane == 0) {
      parts.push_back((*samplers[e])(row(logprobs, e)));
    } else {
      mx::StreamContext on(streams[lane - 1]);
      parts.push_back((*samplers[e])(row(logprobs, e)));
    }
  }
  return mx::concatenate(parts, 0);
}

BatchGenerator::Dispatched BatchGenerator::dispatch_step(GenBatch& g) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto inputs = *g.next_tokens;
  auto current_logprobs = std::move(g.next_logprobs);
  const int B = static_cast<int>(g.uids.size());

  route(g.rows);
  auto logits = model_(mx::expand_dims(inputs, 1), &g.cache);
  const int L = logits.shape(1);
  logits = mx::squeeze(mx::slice(logits, {0, L - 1, 0}, {B, L, logits.shape(2)}), 1);

  std::vector<mx::array> token_context;
  logits = process_logits(g, inputs, logits, token_context);

  auto logprobs = kernels::cpu::log_probs_last_axis(model_.cpu_kernels(), logits);
  auto sampled = sample(g, logprobs);

  g.next_tokens = sampled;
  g.next_logprobs.clear();
  for (int e = 0; e < B; ++e) g.next_logprobs.push_back(mx::squeeze(row(logprobs, e), 0));
  std::vector<mx::array> pending = {sampled};
  pending.insert(pending.end(), g.next_logprobs.begin(), g.next_logprobs.end());
  pending.insert(pending.end(), token_context.begin(), token_context.end());
  const auto t1 = Clock::now();
  if (o_.inspect_step) o_.inspect_step(pending);
  const auto t1_dispatch = Clock::now();  // the inspection (a DOT export) is neither build nor dispatch
  if (paced_ && &g == &gen_) {
    // Dispatched piece by piece while the host waits (await): most of the dispatch then falls
    // outside this step's build/dispatch/wait split.
    paced_->queue(pending);
    paced_->pump();
  } else {
    mx::async_eval(pending);
  }
  const auto t2 = Clock::now();
  return Dispatched{std::move(inputs), std::move(current_logprobs), std::chrono::duration<double>(t1 - t0).count(),
                    std::chrono::duration<double>(t2 - t1_dispatch).count()};
}

std::pair<std::vector<int32_t>, std::vector<mx::array>> BatchGenerator::read_step(GenBatch& g, const mx::array& inputs,
                                                                                 const std::vector<mx::array>& logprobs,
                                                                                 const Dispatched* timed) {
  using Clock = std::chrono::steady_clock;
  const auto t2 = Clock::now();
  std::vector<mx::array> now = {inputs};
  now.insert(now.end(), logprobs.begin(), logprobs.end());
  mx::eval(now);
  // A step after the first reads what the step before it dispatched: the wait is the device still
  // working on that one (the first step's own wait is its prefill's).
  if (o_.step_timing && timed && !logprobs.empty()) {
    auto& t = *o_.step_timing;
    t.build_s += timed->build_s;
    t.dispatch_s += timed->dispatch_s;
    t.wait_s += std::chrono::duration<double>(Clock::now() - t2).count();
    ++t.steps;
  }
  auto tokens = token_values(inputs);
  for (size_t e = 0; e < g.rows.size(); ++e)
    if (!g.ahead[e]) g.rows[e].tokens.push_back(tokens[e]);
  return {tokens, logprobs};
}

std::pair<std::vector<int32_t>, std::vector<mx::array>> BatchGenerator::step(GenBatch& g) {
  auto d = dispatch_step(g);
  return read_step(g, d.inputs, d.logprobs, &d);
}

void BatchGenerator::dispatch_owed_step() {
  if (!owed_step_) return;
  owed_step_ = false;
  dispatch_step(gen_);  // its inputs, the tokens handed out at the last call, are read already
}

model::CacheList BatchGenerator::extract(const model::CacheList& caches, int idx) const {
  model::CacheList out;
  for (const auto& c : caches) out.push_back(batch_cache(c).extract(idx));
  return out;
}

void BatchGenerator::filter_gen(GenBatch& g, const std::vector<int>& keep) {
  g.uids = pick(g.uids, keep);
  if (keep.empty()) {
    g.cache.clear();
  } else {
    for (auto& c : g.cache) batch_cache(c).filter(keep);
  }
  g.rows = pick(g.rows, keep);
  if (keep.empty())
    g.next_tokens.reset();
  else
    g.next_tokens = mx::take(*g.next_tokens, int_array(keep), 0);
  g.next_logprobs = pick(g.next_logprobs, keep);
  g.token_context = pick(g.token_context, keep);
  g.num_tokens = pick(g.num_tokens, keep);
  g.matchers = pick(g.matchers, keep);
  g.ahead = pick(g.ahead, keep);
  // A step dispatched whose tokens are still to be read holds the rows in their old order.
  if (&g == &gen_ && unread_) {
    unread_->logprobs = pick(unread_->logprobs, keep);
    if (!keep.empty()) unread_->inputs = mx::take(unread_->inputs, int_array(keep), 0);
    if (keep.empty()) unread_.reset();
  }
}

void BatchGenerator::extend_gen(GenBatch other) {
  auto& g = gen_;
  g.uids.insert(g.uids.end(), other.uids.begin(), other.uids.end());
  if (g.cache.empty()) {
    g.cache = std::move(other.cache);
  } else if (!other.cache.empty()) {
    for (size_t i = 0; i < g.cache.size(); ++i) batch_cache(g.cache[i]).extend(batch_cache(other.cache[i]));
  }
  for (auto& r : other.rows) g.rows.push_back(std::move(r));
  if (!g.next_tokens)
    g.next_tokens = other.next_tokens;
  else if (other.next_tokens)
    g.next_tokens = mx::concatenate({*g.next_tokens, *other.next_tokens}, 0);
  for (auto& a : other.next_logprobs) g.next_logprobs.push_back(a);
  for (auto& a : other.token_context) g.token_context.push_back(a);
  for (int n : other.num_tokens) g.num_tokens.push_back(n);
  for (auto& m : other.matchers) g.matchers.push_back(m);
  for (char a : other.ahead) g.ahead.push_back(a);
}

std::vector<BatchGenerationResponse> BatchGenerator::gen_next() {
  auto& g = gen_;
  if (g.uids.empty()) return {};
  // mlx-lm dispatches the next step before it reads the tokens of the one before. When those are
  // every row's first tokens and nothing else waits (no prompt queued or prefilling), or any row's
  // first with first_tokens_early, they are read first and handed out, and the next step, with the
  // same rows, is dispatched at the next call (or by remove(), before it drops rows): the time to
  // first token loses a step's host dispatch. A row that finishes at this token needs that step
  // first (mlx-lm's includes the row, and the row's cache is handed out after it), so it is then
  // dispatched at once.
  const auto at_first = [](int n) { return n == 0; };
  const bool first_tokens =
      (o_.first_tokens_early && o_.prompts_first && std::any_of(g.num_tokens.begin(), g.num_tokens.end(), at_first)) ||
      (unprocessed_.empty() && prompt_.uids.empty() && std::all_of(g.num_tokens.begin(), g.num_tokens.end(), at_first));
  std::vector<int32_t> tokens;
  std::vector<mx::array> logprobs;
  if (first_tokens) {
    std::tie(tokens, logprobs) = read_step(g, *g.next_tokens, g.next_logprobs, nullptr);
    owed_step_ = true;
  } else {
    std::tie(tokens, logprobs) = step(g);
  }
  // The buffer cache a prefill left: cleared at the next call, once these tokens are handed out.
  if (clear_cache_pending_) clear_cache_next_call_ = true;
  return hand_out(tokens, logprobs);
}

std::vector<BatchGenerationResponse> BatchGenerator::hand_out(const std::vector<int32_t>& tokens,
                                                              const std::vector<mx::array>& logprobs) {
  auto& g = gen_;
  std::vector<std::optional<std::string>> finish(g.uids.size());
  for (size_t i = 0; i < g.uids.size(); ++i) {
    if (g.ahead[i]) continue;
    g.num_tokens[i] += 1;
    if (g.num_tokens[i] >= g.rows[i].max_tokens) finish[i] = "length";
    if (g.matchers[i].advance(tokens[i])) finish[i] = "stop";
  }
  if (std::any_of(finish.begin(), finish.end(), [](const auto& f) { return f.has_value(); })) dispatch_owed_step();
  std::vector<int> keep;
  std::vector<BatchGenerationResponse> responses;
  for (size_t i = 0; i < g.uids.size(); ++i) {
    if (g.ahead[i]) {  // its token went out when it joined
      g.ahead[i] = 0;
      keep.push_back(static_cast<int>(i));
      continue;
    }
    const auto& finish_reason = finish[i];
    BatchGenerationResponse r{g.uids[i], tokens[i], logprobs[i], finish_reason, {}, {}};
    if (finish_reason) {
      r.prompt_cache = extract(g.cache, static_cast<int>(i));
      r.all_tokens = g.rows[i].tokens;
    } else {
      keep.push_back(static_cast<int>(i));
    }
    responses.push_back(std::move(r));
  }
  if (keep.size() < g.uids.size()) filter_gen(keep);
  return responses;
}

void BatchGenerator::begin_call() {
  split_ = {};
  const auto t_owed = Clock::now();
  dispatch_owed_step();
  split_.owed_ms = ms_since(t_owed);
  if (clear_cache_next_call_) {
    mx::clear_cache();
    clear_cache_pending_ = clear_cache_next_call_ = false;
  }
}

std::pair<std::vector<BatchPromptResponse>, std::vector<BatchGenerationResponse>> BatchGenerator::next() {
  if (o_.batch_invariant) return solo_next();
  if (o_.join_prefill_beside && beside()) return next_beside();
  begin_call();
  std::vector<BatchGenerationResponse> generation_responses;
  std::vector<BatchPromptResponse> prompt_responses;

  auto generate = [&] {
    const auto t0 = Clock::now();
    if (!gen_.uids.empty()) {
      generation_responses = gen_next();
      generation_steps_ += 1;
      if (generation_steps_ % 512 == 0) mx::clear_cache();
    }
    split_.generate_ms += ms_since(t0);
  };

  if (o_.prompts_first) {
    // The queued prompts' chunk first, the rows it finishes started, then one step over all rows;
    // no prompt work while the decoding rows fill --decode-concurrency (mlx-lm's early exit).
    if (static_cast<int>(gen_.uids.size()) < o_.completion_batch_size) {
      admit_prompts();
      start_finished_prompts(prompt_responses);  // prompts of one token (or a cache hit leaving one)
      prefill_next_chunk(prompt_responses);
      start_finished_prompts(prompt_responses);
    }
    generate();
    return {std::move(prompt_responses), std::move(generation_responses)};
  }

  // Generate tokens first
  generate();

  // Exit early because we already have our hands full with decoding
  if (static_cast<int>(gen_.uids.size()) >= o_.completion_batch_size)
    return {std::move(prompt_responses), std::move(generation_responses)};

  // Check if we have sequences and add them to the prompt batch
  admit_prompts();
  // Split the prompt sequences to the ones moving to generation and the rest
  start_finished_prompts(prompt_responses);
  // Extract the next prompts input and process them
  prefill_next_chunk(prompt_responses);
  return {std::move(prompt_responses), std::move(generation_responses)};
}

void BatchGenerator::admit_prompts() {
  const auto t0 = Clock::now();
  const int n = std::min({o_.prefill_batch_size - static_cast<int>(prompt_.uids.size()),
                          o_.completion_batch_size - static_cast<int>(gen_.uids.size()),
                          static_cast<int>(unprocessed_.size())});
  if (n > 0) {
    PromptBatch added = make_batch(n, processing_);
    prompt_.uids.insert(prompt_.uids.end(), added.uids.begin(), added.uids.end());
    if (prompt_.cache.empty()) {
      prompt_.cache = std::move(added.cache);
    } else if (!added.cache.empty()) {
      for (size_t i = 0; i < prompt_.cache.size(); ++i) batch_cache(prompt_.cache[i]).extend(batch_cache(added.cache[i]));
    }
    for (auto& r : added.rows) prompt_.rows.push_back(std::move(r));
  }
  split_.admit_ms += ms_since(t0);
}

void BatchGenerator::start_finished_prompts(std::vector<BatchPromptResponse>& responses) {
  const auto t0 = Clock::now();
  if (auto started = split_started(prompt_, processing_, responses)) extend_gen(std::move(*started));
  split_.start_ms += ms_since(t0);
}

std::optional<BatchGenerator::GenBatch> BatchGenerator::split_started(PromptBatch& batch,
                                                                     std::vector<Processing>& processing,
                                                                     std::vector<BatchPromptResponse>& responses) {
  std::vector<int> keep, split;
  for (size_t i = 0; i < processing.size(); ++i) {
    const auto& segments = processing[i].segments;
    if (segments.size() == 1 && segments[0].size() == 1)
      split.push_back(static_cast<int>(i));
    else
      keep.push_back(static_cast<int>(i));
  }
  if (split.empty()) return std::nullopt;
  // Actually split off part of the prompt batch and start generation
  std::vector<int32_t> last_inputs;
  std::vector<int> totals;
  for (int i : split) {
    last_inputs.push_back(processing[i].segments[0][0]);
    totals.push_back(processing[i].total);
  }
  processing = pick(processing, keep);
  PromptBatch moving;
  moving.uids = batch.uids;
  for (const auto& c : batch.cache) moving.cache.push_back(c->clone());
  moving.rows = batch.rows;
  filter_prompt(batch, keep);
  filter_prompt(moving, split);
  GenBatch started = start_generation(std::move(moving), last_inputs);
  for (size_t i = 0; i < totals.size(); ++i)
    responses.push_back(BatchPromptResponse{started.uids[i], totals[i], totals[i], true, true});
  return started;
}

std::vector<std::vector<int32_t>> BatchGenerator::take_chunk(std::vector<Processing>& processing,
                                                             const std::vector<int>& uids,
                                                             std::vector<BatchPromptResponse>& responses) const {
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < processing.size(); ++i) {
    auto& seq = processing[i];
    BatchPromptResponse response{uids[i], 0, 0, false, false};
    auto& first = seq.segments.front();
    const int take = std::min(static_cast<int>(first.size()), o_.prefill_step_size);
    prompts.emplace_back(first.begin(), first.begin() + take);
    first.erase(first.begin(), first.begin() + take);
    if (first.empty()) {
      seq.segments.pop_front();
      response.end_of_segment = true;
    }
    seq.processed += take;
    response.processed = seq.processed;
    response.total = seq.total;
    responses.push_back(response);
  }
  return prompts;
}

bool BatchGenerator::down_to_last_token(const std::vector<Processing>& processing) {
  return std::all_of(processing.begin(), processing.end(), [](const Processing& p) {
    return p.segments.size() == 1 && p.segments.front().size() == 1;
  });
}

void BatchGenerator::prefill_next_chunk(std::vector<BatchPromptResponse>& responses) {
  auto prompts = take_chunk(processing_, prompt_.uids, responses);
  // Process the prompts (not waiting for a chunk after which every row is left its last token:
  // their first step, at this call or the next, is encoded while the device runs it)
  const bool last_chunk = down_to_last_token(processing_);
  const auto t0 = Clock::now();
  prompt(prompt_, prompts, last_chunk ? PrefillWait::all_but_last : PrefillWait::every_chunk);
  split_.prefill_ms += ms_since(t0);
}

std::string BatchGenerator::describe_last_split() const {
  char text[200];
  std::snprintf(text, sizeof(text),
                "owed step %.2f, decode %.2f, admit %.2f, start %.2f, prefill %.2f: build %.2f, wait %.2f, dispatch %.2f",
                split_.owed_ms, split_.generate_ms, split_.admit_ms, split_.start_ms, split_.prefill_ms,
                split_.prefill_build_ms, split_.prefill_wait_ms, split_.prefill_dispatch_ms);
  if (split_.joined_beside > 0) return std::string(text) + "; " + std::to_string(split_.joined_beside) + " joined beside";
  return text;
}

std::vector<BatchGenerationResponse> BatchGenerator::next_generated() {
  while (true) {
    auto [prompt_responses, generation_responses] = next();
    if (generation_responses.empty() && !prompt_responses.empty()) continue;
    return std::move(generation_responses);
  }
}

void BatchGenerator::remove(const std::vector<int>& uids) {
  dispatch_owed_step();  // its rows are the batch as it was when their tokens were handed out
  std::set<int> drop(uids.begin(), uids.end());
  drop_joining(drop);
  std::deque<Pending> left;
  for (auto& p : unprocessed_)
    if (!drop.count(p.uid)) left.push_back(std::move(p));
  unprocessed_ = std::move(left);
  std::vector<int> keep_prompt, keep_gen;
  for (size_t i = 0; i < prompt_.uids.size(); ++i)
    if (!drop.count(prompt_.uids[i])) keep_prompt.push_back(static_cast<int>(i));
  for (size_t i = 0; i < gen_.uids.size(); ++i)
    if (!drop.count(gen_.uids[i])) keep_gen.push_back(static_cast<int>(i));
  if (keep_prompt.size() < prompt_.uids.size()) {
    filter_prompt(prompt_, keep_prompt);
    processing_ = pick(processing_, keep_prompt);
  }
  if (keep_gen.size() < gen_.uids.size()) filter_gen(keep_gen);
  std::erase_if(solo_, [&](const std::unique_ptr<SoloRow>& s) { return drop.count(s->uid) > 0; });
}

// --- batch-invariant mode (ours) ---
//
// Why each row runs its own forward: a row of a batched step is byte-equal to the row run alone
// only where every op of the step gives a row of a B-row call the bytes of a 1-row call, and the
// batched step also differs from the solo one in its inputs (left-padded keys under a mask in
// place of the row's own keys, prompts prefilled in other chunks). Which ops keep rows apart
// depends on the backend (bench/batch_invariant/ops_probe.py measures it: MLX's CPU matmuls,
// quantized matmuls, RMSNorm, RoPE with per-row offsets and masked SDPA over padded keys do; an
// M-row CUDA matmul does not), so the one construction exact on every backend is the solo
// computation itself: each row is a TokenGenerator over its own cache, which is what
// `mlxrt generate` runs. A step still serves every row: all rows' next steps are dispatched
// (async) before the previous tokens are read, so the device is never idle between rows.

std::pair<std::vector<BatchPromptResponse>, std::vector<BatchGenerationResponse>> BatchGenerator::solo_next() {
  std::vector<BatchGenerationResponse> generation_responses;
  std::vector<BatchPromptResponse> prompt_responses;

  if (!solo_.empty()) {
    std::vector<std::unique_ptr<SoloRow>> keep;
    for (auto& s : solo_) {
      auto t = s->gen->next();  // never empty: the row leaves at max_tokens
      if (!t) throw std::logic_error("batch-invariant row " + std::to_string(s->uid) + " ended before max_tokens");
      s->num_tokens += 1;
      s->row.tokens.push_back(t->token);
      std::optional<std::string> finish_reason;
      if (s->num_tokens >= s->row.max_tokens) finish_reason = "length";
      if (s->matcher.advance(t->token)) finish_reason = "stop";
      BatchGenerationResponse r{s->uid, t->token, t->logprobs, finish_reason, {}, {}};
      if (finish_reason) {
        s->gen.reset();  // waits for the step it dispatched ahead (it wrote the last token's keys)
        r.prompt_cache = std::move(s->cache);
        r.all_tokens = s->row.tokens;
      } else {
        keep.push_back(std::move(s));
      }
      generation_responses.push_back(std::move(r));
    }
    solo_ = std::move(keep);
    generation_steps_ += 1;
    if (generation_steps_ % 512 == 0) mx::clear_cache();
  }

  // New rows join between steps: each prefilled alone (the solo run's chunks), its first step
  // dispatched, its first token read at the next step.
  const int n = std::min({o_.prefill_batch_size, o_.completion_batch_size - static_cast<int>(solo_.size()),
                          static_cast<int>(unprocessed_.size())});
  for (int k = 0; k < n; ++k) {
    Pending p = std::move(unprocessed_.front());
    unprocessed_.pop_front();
    std::vector<int32_t> prompt;
    for (const auto& seg : p.segments) prompt.insert(prompt.end(), seg.begin(), seg.end());
    auto matcher = p.row.stop.matcher();
    auto s = std::make_unique<SoloRow>(SoloRow{p.uid, std::move(p.row), std::move(p.cache), nullptr, nullptr, matcher, 0});
    s->row.tokens.insert(s->row.tokens.end(), prompt.begin(), prompt.end());
    GenerateOptions go;
    go.max_tokens = s->row.max_tokens;
    go.prefill_step_size = o_.prefill_step_size;
    go.sampler = s->row.sampler ? *s->row.sampler : *fallback_;
    go.logits_processors = s->row.processors;
    model::CausalLM* row_model = &model_;
    if (o_.adapter_rows) {
      s->slot_model = std::make_unique<model::AdapterSlotModel>(model_, o_.adapter_rows, s->row.adapter_slot);
      row_model = s->slot_model.get();
    }
    s->gen = std::make_unique<TokenGenerator>(*row_model, prompt, std::move(go), &s->cache);
    const int total = static_cast<int>(prompt.size());
    prompt_responses.push_back(BatchPromptResponse{s->uid, total, total, true, true});
    solo_.push_back(std::move(s));
  }
  return {std::move(prompt_responses), std::move(generation_responses)};
}

}  // namespace mlxrt::generate
