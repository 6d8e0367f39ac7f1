#pragma once
/** Streamed experts (--expert-memory): the stacked expert tensors of the MoE layers stay in the
 * weight files, and a forward step reads only the experts its router picked, into an LRU cache
 * bounded by a byte budget over all layers. A layer then runs the same gather_mm / gather_qmm over
 * a compact stack of its selected experts, with the router's indices remapped into that stack;
 * every output row depends only on its own expert's slice, so the result is byte-equal to the run
 * with every expert resident. */
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <mlx/array.h>

namespace mlxrt::model::nn {

namespace mx = mlx::core;

/** An LRU over (block, expert) keys with a size each: the cache policy of ExpertStore, on its own
 * so that it can be tested without files. */
class ExpertLru {
 public:
  struct Key {
    int block = 0, expert = 0;
    bool operator==(const Key&) const = default;
  };

  /** Whether `key` is held; marks it most recently used and in use by the current step. */
  bool touch(const Key& key);
  /** Adds `key` (not held) as the most recently used, in use by the current step. */
  void insert(const Key& key, uint64_t bytes);
  /** Starts a new step: what the previous step used may be evicted again. */
  void next_step() { ++step_; }
  /** Evicts least recently used keys not in use by the current step until the held bytes are at
   * most `budget`; returns the evicted keys, oldest first. */
  std::vector<Key> evict_to(uint64_t budget);
  uint64_t bytes() const { return bytes_; }
  size_t size() const { return order_.size(); }
  bool holds(const Key& key) const { return index_.count(pack(key)) > 0; }

 private:
  struct Item {
    Key key;
    uint64_t bytes;
    uint64_t step;
  };
  static uint64_t pack(const Key& k) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(k.block)) << 32) | static_cast<uint32_t>(k.expert);
  }
  std::list<Item> order_;  // most recently used first
  std::unordered_map<uint64_t, std::list<Item>::iterator> index_;
  uint64_t bytes_ = 0;
  uint64_t step_ = 0;
};

/** A byte range of one weight file. */
struct FileSpan {
  int file = 0;         // index into the store's files
  uint64_t offset = 0;  // from the start of the file
  uint64_t size = 0;
};

/** Where a tensor's bytes lie: the concatenation of `parts` (one span for a tensor stored as it
 * is; one per expert when a sanitize stacks experts stored one by one). */
struct TensorSource {
  std::vector<FileSpan> parts;
  uint64_t size() const {
    uint64_t n = 0;
    for (const auto& p : parts) n += p.size;
    return n;
  }
};

/** One stacked expert tensor [num_experts, ...] of a block, as stored in the weight files. */
struct StreamedTensor {
  std::string name;
  mx::Dtype dtype = mx::float32;
  mx::Shape expert_shape;  // the shape of one expert's slice (without the leading num_experts)
  uint64_t expert_bytes = 0;
  TensorSource source;
};

class ExpertStore;

/** What the switch layers need while a model is built with streamed experts: the store, and where
 * the bytes of the checkpoint's (lazily loaded, unread) arrays lie in the weight files. Active on
 * the building thread inside an ExpertStreamingScope. */
class ExpertStreaming {
 public:
  /** The weight files of `dir` (as the loader finds them) and their tensors' byte ranges, keyed by
   * the arrays of `weights` (the checkpoint as loaded: name -> lazy array). */
  ExpertStreaming(std::shared_ptr<ExpertStore> store, const std::filesystem::path& dir,
                  const std::unordered_map<std::string, mx::array>& weights);

  const std::shared_ptr<ExpertStore>& store() const { return store_; }
  /** Where the bytes of `a` (a tensor of the checkpoint, possibly renamed, or a stack of
   * such tensors along a new first axis, as sanitize's mx.stack makes) lie. WeightsError naming
   * `name` when `a` was rewritten in another way (then it cannot be read by ranges). Marks `a` as
   * streamed: the loader does not evaluate it. */
  TensorSource streamed_source(const mx::array& a, const std::string& name);
  bool is_streamed(const mx::array& a) const { return streamed_.count(a.id()) > 0; }

 private:
  std::optional<TensorSource> source_of(const mx::array& a) const;
  std::shared_ptr<ExpertStore> store_;
  std::filesystem::path dir_;
  std::unordered_map<std::uintptr_t, TensorSource> sources_;  // by array id
  std::vector<mx::array> keep_;  // the arrays of sources_, alive so that their ids stay theirs
  std::unordered_set<std::uintptr_t> streamed_;
};

struct ExpertStats {
  uint64_t hits = 0, misses = 0;  // expert lookups (one per layer and selected expert)
  uint64_t bytes_read = 0;        // read from the weight files (read-ahead included)
  uint64_t prefetched = 0;        // experts read ahead of their layer (ExpertStore::set_predictor),
                                  // kept or (no room left) dropped
  uint64_t prefetch_hits = 0;     // lookups answered by an expert read ahead (its first use)
  uint64_t resident_bytes = 0, peak_resident_bytes = 0;
  uint64_t budget = 0;
};

/** "Expert cache: ..." — the per-run line printed on stderr. */
std::string format_expert_stats(const ExpertStats& s);

/** The experts a block's router would pick for a hidden state: [..., top_k] indices (lazy). */
using ExpertPredictor = std::function<mx::array(const mx::array& hidden)>;

class ExpertStore {
 public:
  /** `prefetch`: read the next block's likely experts ahead (set_predictor), on a thread of the
   * store's own, while the current block computes. It runs on decode-sized steps and only where the
   * budget holds two blocks' top-k experts, so that what it reads never evicts what the step uses. */
  ExpertStore(uint64_t budget_bytes, std::vector<std::filesystem::path> files, bool prefetch = false);
  const std::vector<std::filesystem::path>& files() const { return files_; }
  ~ExpertStore();
  ExpertStore(const ExpertStore&) = delete;
  ExpertStore& operator=(const ExpertStore&) = delete;

  /** Registers the expert tensors of one MoE block (e.g. a SwitchGLU's gate/up/down weights,
   * scales, biases), `top_k` experts per token; returns the block's id. */
  int add_block(std::vector<StreamedTensor> tensors, int num_experts, int top_k);

  struct Selection {
    mx::array indices;              // the router's indices, remapped into `tensors`
    std::vector<mx::array> tensors;  // each block tensor, stacked over the selected experts only
  };
  /** How to guess `block`'s experts from the hidden state the block before it routes: its own
   * router over that state (consecutive layers' hidden states differ by a residual update, so the
   * guess mostly holds). Without one, nothing is read ahead for the block. */
  void set_predictor(int block, ExpertPredictor predict);

  /** Evaluates `indices` (the router's top-k), brings the experts they name into the cache, and
   * returns the compact stacks, in the block's tensor order. With `hidden` (the block's input) and
   * a predictor for the next block, that block's guessed experts are queued for reading ahead. The
   * bytes read are the same either way: read-ahead only changes when they are read. */
  Selection select(int block, const mx::array& indices, const std::optional<mx::array>& hidden = std::nullopt);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  /** The smallest budget that holds one block's top-k experts (the largest block). */
  uint64_t min_budget() const;
  ExpertStats stats() const;

 private:
  struct Block {
    std::vector<StreamedTensor> tensors;
    int num_experts = 0, top_k = 0;
    uint64_t expert_bytes = 0;  // all of the block's tensors, one expert
    ExpertPredictor predict;
  };
  /** Reads one expert's tensors (pread on the files opened at construction: safe without the lock). */
  std::vector<mx::array> read_expert(const Block& block, int expert) const;
  void read_span(const TensorSource& source, uint64_t offset, uint64_t size, char* out) const;
  /** Queues the experts of `block` named by `guess` (evaluated) that are not held; holds the lock. */
  void queue_prefetch(int block, const mx::array& guess);
  /** Makes `key` (needed now) resident: waits for its read-ahead, or reads it; holds the lock. */
  void bring_in(std::unique_lock<std::mutex>& lock, int block, int expert);
  void prefetch_loop();
  /** Evicts (ExpertLru::evict_to) down to `budget`, dropping the evicted experts' data; holds the lock. */
  void evict_to(uint64_t budget);

  uint64_t budget_;
  std::vector<std::filesystem::path> files_;
  std::vector<int> fds_;
  std::vector<Block> blocks_;
  ExpertLru lru_;
  std::unordered_map<uint64_t, std::vector<mx::array>> held_;  // by packed (block, expert)
  ExpertStats stats_;
  mutable std::mutex mutex_;
  // Read-ahead: keys queued and not yet started, keys being read, and read-ahead keys not used yet.
  bool prefetch_ = false;
  std::deque<uint64_t> queued_;
  std::unordered_set<uint64_t> reading_;
  std::unordered_set<uint64_t> unused_prefetch_;
  std::condition_variable work_, read_done_;
  bool stopping_ = false;
  std::thread worker_;  // started with the first read-ahead; joined by the destructor
};

}  // namespace mlxrt::model::nn
