#pragma once
/** mlx-lm's continuous batching (BatchGenerator, PromptProcessingBatch and GenerationBatch in
 * mlx_lm/generate.py @ mlx-lm 0.32.2): sequences are inserted at any time, prefilled together
 * (right-padded, then rolled into a left-padded BatchKVCache), and decoded together one token per
 * row per step; rows leave when they stop or reach max_tokens, new rows join between steps. Each
 * row has its own sampler, logits processors, stop sequences and max_tokens. */
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <mlx/array.h>
#include <mlx/stream.h>

#include "mlxrt/cache/batch_cache.h"
#include "mlxrt/generate/generate_step.h"
#include "mlxrt/generate/paced_dispatch.h"
#include "mlxrt/generate/stop.h"
#include "mlxrt/model/causal_lm.h"
#include "mlxrt/model/nn/adapter_rows.h"

namespace mlxrt::generate {

/** A row's sampler. Rows that hold the same object are sampled in one call over their logprobs
 * (mlx-lm's `all(s is samplers[0] ...)`); otherwise each row is sampled on its own, in row order. */
using SharedSampler = std::shared_ptr<const Sampler>;

/** Whether `model`'s caches can be merged into a batch (mlx_lm.server's is_batchable: every cache
 * of make_prompt_cache has `merge`); nullopt when they can, else why not. mlxrt batches the
 * full-attention KVCache layers. */
std::optional<std::string> batching_unsupported_reason(const model::CausalLM& model);

struct BatchGeneratorOptions {
  int max_tokens = 128;
  std::vector<std::vector<int32_t>> stop_tokens;  // the default stop sequences
  SharedSampler sampler;                          // the fallback; null: greedy
  int completion_batch_size = 32;
  int prefill_batch_size = 8;
  int prefill_step_size = 2048;
  /** --batch-invariant (ours, not mlx-lm's): each row is computed as its solo run would be (a
   * TokenGenerator over its own unpadded cache: the same prefill chunks of prefill_step_size, the
   * same one-row decode step, its own sampler and logits processors), so its tokens and logprobs
   * are byte-equal to `mlxrt generate` of that request whatever else is in the batch, on every
   * backend. Rows are still scheduled together (joining and leaving between steps, each step
   * dispatching every row's next token before reading any), but each row's forward is its own. */
  bool batch_invariant = false;
  /** A mixed-adapter model's row assignment (model::AdaptedModels::rows): set before each forward
   * call from the rows' adapter_slot. Null: the model has one adapter (or none) for every row. */
  std::shared_ptr<model::nn::AdapterRows> adapter_rows;
  /** Called with each batched decode step's outputs before they are dispatched (tools: the op
   * graph of one step, `mlxrt batch-generate --step-graph`). */
  std::function<void(const std::vector<mx::array>&)> inspect_step;
  /** When set, each batched decode step that reads a step dispatched before it adds its build /
   * dispatch / wait split here (`mlxrt batch-generate --step-timing`), as a solo step does into
   * GenerateOptions::step_timing. Not for the batch-invariant rows (each a TokenGenerator). */
  StepTiming* step_timing = nullptr;
  /** CPU streams besides the default one that rows with samplers of their own are spread over
   * (row e on stream e mod (n + 1), 0 being the default): each stream has its own thread, so
   * another core draws those rows while this one draws the rest. The same ops on the same
   * inputs: the same bytes. Empty, or off the CPU: every row on the default stream. */
  std::vector<mx::Stream> sample_streams;
  /** The order of one next() (ours; the server's default): mlx-lm decodes the generating rows
   * first, then admits and prefills a chunk of the queued prompts, and starts the rows whose
   * prompts are down to their last token at the NEXT call, whose first tokens it hands out at the
   * call after that. So a request that joins a running batch gets its first token three decoding
   * steps of the whole batch after its prefill. With prompts_first, next() admits and prefills
   * first, starts the rows whose prompts that chunk finished in the same call, and then runs the
   * decoding step over every row, the new ones included: their first tokens come out of that
   * call, one step of the batch (the one already on the device) after they arrive.
   * Each step is one mlx-lm runs for some arrival times (the same prefill chunks, the same first
   * step of the starting rows alone, then steps over the rows generating), so each row's bytes are
   * what mlx-lm gives with that batch; for prompts of more than one token that all fit one
   * prefill batch, the steps are mlx-lm's own (a one-token prompt is started at once by both, and
   * mlx-lm then decodes it once before the others' first step). Still one prefill chunk per call: long prompts interleave with decoding as in
   * mlx-lm. */
  bool prompts_first = false;
  /** mlx-lm clears MLX's buffer cache after every prefill chunk (mx.clear_cache), so the steps
   * after it allocate their buffers anew: on a CUDA GPU that is about a third of a joining
   * request's time to first token under load (bench/RESULTS.md, twenty-fourth session). A
   * positive value clears it after a chunk only when it holds more than this many bytes (ours;
   * the server's default); 0 clears it as mlx-lm does. The clear every 512 steps stays. */
  size_t prefill_buffer_cache_bytes = 0;
  /** mlx-lm dispatches a step before it reads the tokens of the step before it, so a row's first
   * token is handed out only once the batch's next step is encoded: under load, one step of the
   * host's encoding (8-19 ms for 32 rows on an H100) between the device giving the token and the
   * client getting it. With first_tokens_early and prompts_first (ours; the server's default), a
   * call whose tokens include any row's first reads them first, hands them out, and dispatches
   * that next step at the start of the following call, as it already does when every row is at
   * its first token and nothing waits. The same steps with the same rows and inputs: the same
   * bytes; the device idles while those tokens are read and the deferred step is encoded, once per
   * call where rows join. In mlx-lm's order a call's prompt work follows its decoding and may
   * start rows, so the step can't wait past it: there this does nothing. */
  bool first_tokens_early = false;
  /** Joining prompts prefilled beside the decoding batch (ours; `mlxrt server --join-prefill
   * beside`). With prompts_first, a prompt that arrives while rows decode is prefilled, and its
   * first step run, on a second stream of the device, so the device works on it while the batch's
   * steps go on; its first token is handed out as soon as it is there, and its rows join the batch
   * at the next step boundary after that (batch_generator_beside.cpp). While a step's tokens are
   * awaited, the interrupt set by set_interrupt() is polled, and next() returns early when it
   * says work came in, so a request is not left waiting for the step in flight before its prefill
   * starts. Each step is still one the in-order mode runs for some arrival time (the prompts'
   * prefill chunks and first step on their own, then steps over the merged rows), so the bytes are
   * those of a batch mlx-lm can form; only when rows merge depends on the device's timing. With
   * no rows decoding (a batch submitted at once), prompts take the in-order path. Measured on the
   * CPU and on an H100 it gave later first tokens than the in-order path (bench/RESULTS.md,
   * twenty-eighth session): opt-in. */
  bool join_prefill_beside = false;
  /** With join_prefill_beside (ours; `mlxrt server --join-prefill interleaved`): the joining
   * prompts' prefill and first step go on the batch's own stream, and the batch's steps are
   * dispatched a piece of about step_piece_ops ops at a time (0: 16 on the CPU, 128 on a GPU), at
   * most step_pieces_ahead pieces ahead of the device (PacedDispatch). A request that arrives
   * mid-step then waits for the few pieces the device holds, not for the step in flight and the
   * one dispatched after it: its prefill runs between two pieces of a step. Same ops on the same
   * inputs: the same bytes as beside. */
  bool join_prefill_interleaved = false;
  int step_piece_ops = 0;
  int step_pieces_ahead = 2;
  /** ... and how many pieces ahead a next() leaves the device with when it returns (the host then
   * hands out tokens and builds the next step while the device works on those). */
  int step_pieces_ahead_on_return = 2;
};

/** New MLX CPU streams for BatchGeneratorOptions::sample_streams, on the calling thread (MLX's
 * streams belong to the thread that made them): one per core besides this one, up to three;
 * none off the CPU or on one core. */
std::vector<mx::Stream> make_sample_streams();

/** One sequence to insert. Empty optionals take the generator's defaults. */
struct BatchRequest {
  std::vector<int32_t> prompt;
  std::optional<int> max_tokens;
  /** The sequence's cache so far (a prompt-cache hit): KVCaches, one per layer, or empty for a
   * fresh one. `all_tokens` are the tokens it holds. */
  model::CacheList cache;
  std::vector<int32_t> all_tokens;
  SharedSampler sampler;
  std::vector<LogitsProcessor> logits_processors;
  std::optional<StopSequences> stop_sequences;
  /** What lets rows share one op per step instead of one each (the same bytes: these ops work
   * row by row). greedy_sampler: `sampler` is mlx-lm's greedy argmax (temp 0), so rows that all
   * sample greedily take one argmax over the batch. logit_bias_only: `logits_processors` is what
   * make_logits_processors makes from this logit bias alone, so rows that all carry the same bias
   * (each id once) get one column add over the batch. */
  bool greedy_sampler = false;
  std::optional<std::vector<std::pair<int32_t, double>>> logit_bias_only;
  /** The adapter slot the row computes with (BatchGeneratorOptions::adapter_rows; 0 without). */
  int adapter_slot = 0;
};

struct BatchPromptResponse {
  int uid;
  int processed, total;
  bool end_of_segment, end_of_prompt;
};

struct BatchGenerationResponse {
  int uid;
  int32_t token;
  mx::array logprobs;                  // [vocab]
  std::optional<std::string> finish_reason;  // "stop" / "length" on the row's last token
  model::CacheList prompt_cache;       // on the last token: the row's cache (KVCaches)
  std::vector<int32_t> all_tokens;     // on the last token: the tokens its cache holds
};

class BatchGenerator {
 public:
  BatchGenerator(model::CausalLM& model, BatchGeneratorOptions options);
  ~BatchGenerator();

  /** Queues sequences; returns their uids (consecutive, from 0). UsageError on an empty prompt or
   * max_tokens <= 0. */
  std::vector<int> insert(std::vector<BatchRequest> requests);
  /** One step: decodes one token for every generating row, then moves finished prompts into the
   * generation batch and prefills the next chunk of the rest. */
  std::pair<std::vector<BatchPromptResponse>, std::vector<BatchGenerationResponse>> next();
  /** next() until it yields generated tokens (empty once nothing is left). */
  std::vector<BatchGenerationResponse> next_generated();
  /** Drops the rows of `uids` wherever they are (queued, prefilling or generating). */
  void remove(const std::vector<int>& uids);
  /** Rows queued, prefilling or generating. */
  size_t size() const;
  /** join_prefill_beside: polled while a step's tokens are awaited; when it answers true, next()
   * returns at once (perhaps with nothing) so the caller can insert what came in. It must turn
   * false once the caller has taken that work, or each next() ends as soon as it starts waiting. */
  void set_interrupt(std::function<bool()> interrupt) { interrupt_ = std::move(interrupt); }
  size_t generating() const { return gen_.uids.size() + solo_.size(); }

  /** Where the last next() spent its time, in milliseconds (the server's DEBUG step line): the
   * step owed from the call before (dispatched first), the decoding rows' step, admitting queued
   * prompts (their caches merged), starting the rows whose prompts ended (their first step), and
   * the prefill chunk in all, of which building its graph, waiting for it, and only dispatching it
   * (its last chunk: the rows' first step is encoded while the device runs it). */
  struct NextSplit {
    double owed_ms = 0, generate_ms = 0, admit_ms = 0, start_ms = 0, prefill_ms = 0, prefill_build_ms = 0,
           prefill_wait_ms = 0, prefill_dispatch_ms = 0;
    int joined_beside = 0;  // rows whose prefill this call dispatched beside the batch (join_prefill_beside)
  };
  const NextSplit& last_split() const { return split_; }
  /** last_split() as "owed step A, decode B, admit C, start D, prefill E: build F, wait G, dispatch H"
   * (milliseconds, two decimals), then "; N joined beside" when rows did: the server's DEBUG step
   * line and batch-generate --step-timing. */
  std::string describe_last_split() const;

 private:
  struct Row {
    std::vector<int32_t> tokens;  // what the cache holds
    SharedSampler sampler;
    std::vector<LogitsProcessor> processors;
    StopSequences stop;
    int max_tokens;
    bool greedy = false;  // samples with the greedy argmax (its own or the fallback)
    std::optional<std::vector<std::pair<int32_t, double>>> logit_bias_only;
    int adapter_slot = 0;
  };
  struct Pending {
    int uid;
    std::deque<std::vector<int32_t>> segments;
    Row row;
    model::CacheList cache;
  };
  struct Processing {
    std::deque<std::vector<int32_t>> segments;
    int processed, total;
  };
  struct PromptBatch {
    std::vector<int> uids;
    model::CacheList cache;  // BatchKVCaches / BatchRotatingKVCaches, one per layer (empty with no rows)
    std::vector<Row> rows;
  };
  struct GenBatch {
    std::vector<int> uids;
    model::CacheList cache;  // BatchKVCaches / BatchRotatingKVCaches, one per layer (empty with no rows)
    std::vector<Row> rows;
    std::optional<mx::array> next_tokens;
    std::vector<mx::array> next_logprobs;
    std::vector<std::optional<mx::array>> token_context;
    std::vector<int> num_tokens;
    std::vector<StopSequences::Matcher> matchers;
    /** join_prefill_beside: the row's token in next_tokens was handed out already (a joining row's
     * first token, read before it merged): the next read skips it. */
    std::vector<char> ahead;
  };

  /** A row of the batch-invariant mode: its own cache and solo generator. */
  struct SoloRow {
    int uid;
    Row row;
    model::CacheList cache;
    std::unique_ptr<model::CausalLM> slot_model;  // a mixed-adapter model pinned to the row's slot
    std::unique_ptr<TokenGenerator> gen;  // holds &cache: SoloRows do not move
    StopSequences::Matcher matcher;
    int num_tokens = 0;
  };
  /** next() of the batch-invariant mode. */
  std::pair<std::vector<BatchPromptResponse>, std::vector<BatchGenerationResponse>> solo_next();

  /** A step's sampled tokens (int32 or uint32), read as they are (batch_generator.cpp says why). */
  static std::vector<int32_t> token_values(const mx::array& a);
  /** Points a mixed-adapter model's rows at their slots before a forward call over `rows`. */
  void route(const std::vector<Row>& rows) const;

  /** The next n queued prompts as a prompt batch; their prefill progress goes to `processing`. */
  PromptBatch make_batch(int n, std::vector<Processing>& processing);
  /** Admits up to what --prompt-concurrency and --decode-concurrency leave room for from the queue
   * into the prompt batch. */
  void admit_prompts();
  /** Moves the prompt rows down to their last token into the generation batch, dispatching their
   * first step (mlx-lm's split of the prompt batch); their prompt responses go to `responses`. */
  void start_finished_prompts(std::vector<BatchPromptResponse>& responses);
  /** Splits the rows of `batch` down to their last token off into a generation batch and
   * dispatches their first step; nullopt when there are none. */
  std::optional<GenBatch> split_started(PromptBatch& batch, std::vector<Processing>& processing,
                                        std::vector<BatchPromptResponse>& responses);
  /** Dispatches the next prefill chunk of every row of the prompt batch; its responses go to
   * `responses`. */
  void prefill_next_chunk(std::vector<BatchPromptResponse>& responses);
  /** Takes the next chunk (up to prefill_step_size tokens) of each row's first segment; the rows'
   * progress goes to `responses`. */
  std::vector<std::vector<int32_t>> take_chunk(std::vector<Processing>& processing, const std::vector<int>& uids,
                                               std::vector<BatchPromptResponse>& responses) const;
  /** Whether every row has only its last prompt token left (its first step's input). */
  static bool down_to_last_token(const std::vector<Processing>& processing);
  /** Which of a prompt() call's chunks the host waits for: each (mlx-lm), each but the last (its
   * rows' first step is then encoded while the device runs it), or none (beside the batch). */
  enum class PrefillWait { every_chunk, all_but_last, none };
  /** Prefills `tokens` (one chunk a row) into the batch's caches. */
  void prompt(PromptBatch& batch, const std::vector<std::vector<int32_t>>& tokens,
              PrefillWait wait = PrefillWait::every_chunk);
  GenBatch start_generation(PromptBatch batch, const std::vector<int32_t>& last_inputs);
  /** A step built and dispatched: its inputs (the tokens being handed out) and their logprobs. */
  struct Dispatched {
    mx::array inputs;
    std::vector<mx::array> logprobs;
    double build_s, dispatch_s;
  };
  Dispatched dispatch_step(GenBatch& g);
  /** Waits for `inputs` and `logprobs` and records the tokens in g's rows. */
  std::pair<std::vector<int32_t>, std::vector<mx::array>> read_step(GenBatch& g, const mx::array& inputs,
                                                                    const std::vector<mx::array>& logprobs,
                                                                    const Dispatched* timed);
  /** dispatch_step then read_step: the next step runs while the host reads this one's tokens. */
  std::pair<std::vector<int32_t>, std::vector<mx::array>> step(GenBatch& g);
  /** Dispatches the step that gen_next left for later after handing out first tokens. */
  void dispatch_owed_step();
  /** What every next() starts with: its split reset, the owed step dispatched, and the buffer
   * cache a prefill left cleared once that prefill's first tokens went out. */
  void begin_call();
  /** The step's logits processors and samplers: one op over the batch where every row would run
   * the same row-wise one, else one per row as mlx-lm runs them. */
  mx::array process_logits(GenBatch& g, const mx::array& inputs, mx::array logits,
                           std::vector<mx::array>& token_context) const;
  mx::array sample(const GenBatch& g, const mx::array& logprobs) const;
  std::vector<BatchGenerationResponse> gen_next();
  static void filter_prompt(PromptBatch& b, const std::vector<int>& keep);
  /** Whether a prefill chunk leaves MLX's buffer cache to be cleared (prefill_buffer_cache_bytes). */
  bool buffer_cache_over_limit() const;
  void filter_gen(const std::vector<int>& keep) { filter_gen(gen_, keep); }
  void filter_gen(GenBatch& g, const std::vector<int>& keep);
  void extend_gen(GenBatch other);
  /** Counts a read step's tokens into its rows and makes their responses (a finished row's cache
   * extracted and the row dropped); rows whose token was handed out before are skipped. */
  std::vector<BatchGenerationResponse> hand_out(const std::vector<int32_t>& tokens,
                                                const std::vector<mx::array>& logprobs);

  // --- join_prefill_beside (batch_generator_beside.cpp) ---
  /** A joining prompt batch part-way through its prefill on the prompt stream: its next chunk is
   * dispatched once the last one is computed, so a prompt that arrives meanwhile waits for one
   * chunk on that stream, not for the whole of a long prompt. */
  struct Prefilling {
    PromptBatch batch;
    std::vector<Processing> processing;
  };
  /** A joining prompt batch, prefilled and its first step dispatched on the prompt stream. */
  struct Joining {
    GenBatch g;
    bool ready = false;  // its first tokens were looked at: it merges at the next step boundary
  };
  /** Whether next() takes the beside path: rows are decoding or joining, and no prompt batch of
   * the in-order path is part-way through its prefill. */
  bool beside() const;
  std::pair<std::vector<BatchPromptResponse>, std::vector<BatchGenerationResponse>> next_beside();
  /** Admits what --prompt-concurrency and --decode-concurrency leave room for from the queue and
   * dispatches its first prefill chunk on the prompt stream, and the next chunk of each batch whose
   * last one is computed; rows down to their last token get their first step there. Nothing is
   * waited for. */
  void join_beside(std::vector<BatchPromptResponse>& responses);
  /** Starts the rows of `p` down to their last token (their first step dispatched) and dispatches
   * the next chunk of the rest; false once no row is left prefilling. */
  bool prefill_beside(Prefilling& p, std::vector<BatchPromptResponse>& responses);
  /** Hands out the first tokens of the joining batches whose first step is done (none waited
   * for). A batch with a row that finishes at its first token keeps its first tokens for the
   * merged batch's read instead, so its finished rows' caches hold that step as mlx-lm's do. */
  void collect_joined(std::vector<BatchGenerationResponse>& responses);
  /** Merges the looked-at joining batches into the decoding batch (between its steps). */
  void merge_joined();
  /** Waits until `arrays` are computed; false when the interrupt or a joining batch's first
   * tokens came first. */
  bool await(const std::vector<mx::array>& arrays);
  bool joined_ready() const;
  size_t joining_rows() const;
  /** Drops the joining rows of `uids` (remove()). */
  void drop_joining(const std::set<int>& uids);
  model::CacheList extract(const model::CacheList& cache, int idx) const;

  model::CausalLM& model_;
  BatchGeneratorOptions o_;
  SharedSampler fallback_;
  StopSequences default_stop_;
  int uid_count_ = 0;
  std::deque<Pending> unprocessed_;
  std::vector<Processing> processing_;
  PromptBatch prompt_;
  GenBatch gen_;
  long generation_steps_ = 0;
  NextSplit split_;
  bool owed_step_ = false;            // gen_next handed out first tokens before dispatching the next step
  bool clear_cache_pending_ = false;  // a prefill left MLX's buffer cache for after its first tokens
  bool clear_cache_next_call_ = false;  // ... which were read: cleared at the start of the next call
  std::vector<std::unique_ptr<SoloRow>> solo_;  // batch-invariant mode: the generating rows
  std::vector<Prefilling> prefilling_;          // join_prefill_beside: prompt batches prefilling
  std::vector<Joining> joining_;                // ... and past their prefill, joining
  std::optional<Dispatched> unread_;            // ... a step dispatched whose input tokens are not read yet
  std::optional<mx::Stream> prompt_stream_;     // ... made on the thread that first steps beside
  std::function<bool()> interrupt_;
  std::optional<PacedDispatch> paced_;          // join_prefill_interleaved: the batch's steps, piece by piece
};

}  // namespace mlxrt::generate
