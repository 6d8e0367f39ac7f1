#include "mlxrt/model/nn/expert_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <mlx/ops.h>
#include <mlx/primitives.h>
#include <mlx/transforms.h>

#include "mlxrt/io/safetensors_header.h"
#include "mlxrt/io/weights.h"
#include "mlxrt/util/errors.h"

namespace mlxrt::model::nn {

namespace {

// Read-ahead runs on steps of at most this many tokens (decoding, small batches): a prefill
// routes to most experts anyway.
constexpr size_t kPrefetchMaxTokens = 8;

uint64_t pack_key(int block, int expert) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(block)) << 32) | static_cast<uint32_t>(expert);
}

// 1234567 -> "1.235 MB" (powers of 1000, as --expert-memory counts GB).
std::string size_text(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3f %s", v, kUnits[u]);
  return buf;
}

}  // namespace

// --- ExpertLru ---------------------------------------------------------------------------------

bool ExpertLru::touch(const Key& key) {
  auto it = index_.find(pack(key));
  if (it == index_.end()) return false;
  it->second->step = step_;
  order_.splice(order_.begin(), order_, it->second);
  return true;
}

void ExpertLru::insert(const Key& key, uint64_t bytes) {
  order_.push_front(Item{key, bytes, step_});
  index_[pack(key)] = order_.begin();
  bytes_ += bytes;
}

std::vector<ExpertLru::Key> ExpertLru::evict_to(uint64_t budget) {
  std::vector<Key> evicted;
  // Items in use by the current step are the most recent ones: stop at the first of them.
  while (bytes_ > budget && !order_.empty() && order_.back().step != step_) {
    const Item& item = order_.back();
    evicted.push_back(item.key);
    bytes_ -= item.bytes;
    index_.erase(pack(item.key));
    order_.pop_back();
  }
  return evicted;
}

// --- ExpertStreaming ---------------------------------------------------------------------------

ExpertStreaming::ExpertStreaming(std::shared_ptr<ExpertStore> store, const std::filesystem::path& dir,
                                 const std::unordered_map<std::string, mx::array>& weights)
    : store_(std::move(store)), dir_(dir) {
  // The same files, in the same order, as the store reads (and as load_weights loaded: later files win).
  const auto& files = store_->files();
  std::unordered_map<std::string, TensorSource> by_name;
  for (size_t i = 0; i < files.size(); ++i) {
    auto header = io::read_safetensors_header(files[i]);
    for (const auto& t : header.tensors)
      by_name.insert_or_assign(
          t.name, TensorSource{{FileSpan{static_cast<int>(i), header.data_start + t.begin, t.end - t.begin}}});
  }
  for (const auto& [name, a] : weights)
    if (auto it = by_name.find(name); it != by_name.end() && it->second.size() == a.nbytes()) {
      sources_.emplace(a.id(), it->second);
      keep_.push_back(a);
    }
}

std::optional<TensorSource> ExpertStreaming::source_of(const mx::array& a) const {
  if (auto it = sources_.find(a.id()); it != sources_.end()) return it->second;
  if (!a.has_primitive() || a.inputs().empty()) return std::nullopt;
  const std::string prim = a.primitive().name();
  // A reshape of a tensor read as it is stored keeps its bytes in order.
  if ((prim == "ExpandDims" || prim == "Reshape") && a.inputs().size() == 1 &&
      a.inputs()[0].nbytes() == a.nbytes())
    return source_of(a.inputs()[0]);
  // mx.stack: a concatenation of [1, ...] slices along the first axis, each a stored tensor.
  if (prim == "Concatenate" && a.ndim() >= 1) {
    TensorSource out;
    for (const auto& in : a.inputs()) {
      if (in.ndim() != a.ndim() || in.shape(0) != 1 || in.dtype() != a.dtype() ||
          !std::equal(in.shape().begin() + 1, in.shape().end(), a.shape().begin() + 1))
        return std::nullopt;
      auto s = source_of(in);
      if (!s) return std::nullopt;
      out.parts.insert(out.parts.end(), s->parts.begin(), s->parts.end());
    }
    if (out.size() == a.nbytes()) return out;
  }
  return std::nullopt;
}

TensorSource ExpertStreaming::streamed_source(const mx::array& a, const std::string& name) {
  auto s = source_of(a);
  if (!s)
    throw WeightsError(dir_.string() + ": " + name +
                       " cannot be streamed (--expert-memory): the loader rewrites it, so its bytes are not "
                       "stored as they are used; convert the model with mlx-lm, which stores it stacked");
  streamed_.insert(a.id());
  return *s;
}

// --- ExpertStore -------------------------------------------------------------------------------

std::string format_expert_stats(const ExpertStats& s) {
  const uint64_t lookups = s.hits + s.misses;
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.1f%%", lookups ? 100.0 * static_cast<double>(s.hits) / lookups : 0.0);
  std::string ahead;
  if (s.prefetched > 0)
    ahead = ", " + std::to_string(s.prefetched) + " read ahead (" + std::to_string(s.prefetch_hits) + " used)";
  return "Expert cache: hit rate " + std::string(rate) + " (" + std::to_string(s.hits) + " hits, " +
         std::to_string(s.misses) + " misses" + ahead + "), " + size_text(s.bytes_read) + " read from disk, " +
         size_text(s.resident_bytes) + " resident (peak " + size_text(s.peak_resident_bytes) + ", budget " +
         size_text(s.budget) + ")";
}

ExpertStore::ExpertStore(uint64_t budget_bytes, std::vector<std::filesystem::path> files, bool prefetch)
    : budget_(budget_bytes), files_(std::move(files)), fds_(files_.size(), -1), prefetch_(prefetch) {
  stats_.budget = budget_;
  // Opened once here, so that reads (pread) need no lock and can run on the read-ahead thread.
  for (size_t i = 0; i < files_.size(); ++i) {
    fds_[i] = ::open(files_[i].c_str(), O_RDONLY | O_CLOEXEC);
    if (fds_[i] < 0) {
      const std::string why = std::strerror(errno);
      for (int fd : fds_)
        if (fd >= 0) ::close(fd);
      throw WeightsError(files_[i].string() + ": cannot open for streamed experts: " + why);
    }
  }
}

ExpertStore::~ExpertStore() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  if (worker_.joinable()) worker_.join();
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

void ExpertStore::set_predictor(int block, ExpertPredictor predict) {
  std::lock_guard lock(mutex_);
  blocks_.at(block).predict = std::move(predict);
}

int ExpertStore::add_block(std::vector<StreamedTensor> tensors, int num_experts, int top_k) {
  Block b;
  b.num_experts = num_experts;
  b.top_k = std::min(top_k > 0 ? top_k : num_experts, num_experts);
  for (const auto& t : tensors) b.expert_bytes += t.expert_bytes;
  b.tensors = std::move(tensors);
  std::lock_guard lock(mutex_);
  blocks_.push_back(std::move(b));
  return static_cast<int>(blocks_.size()) - 1;
}

uint64_t ExpertStore::min_budget() const {
  uint64_t m = 0;
  for (const auto& b : blocks_) m = std::max(m, b.expert_bytes * static_cast<uint64_t>(b.top_k));
  return m;
}

ExpertStats ExpertStore::stats() const {
  std::lock_guard lock(mutex_);
  ExpertStats s = stats_;
  s.resident_bytes = lru_.bytes();
  return s;
}

void ExpertStore::read_span(const TensorSource& source, uint64_t offset, uint64_t size, char* out) const {
  for (const auto& part : source.parts) {
    if (size == 0) break;
    if (offset >= part.size) {
      offset -= part.size;
      continue;
    }
    const uint64_t n = std::min(size, part.size - offset);
    const int fd = fds_[part.file];
    const std::string path = files_[part.file].string();
    uint64_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd, out + done, n - done, static_cast<off_t>(part.offset + offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        throw WeightsError(path + ": short read of expert weights at offset " +
                           std::to_string(part.offset + offset + done) + (r < 0 ? std::string(": ") + std::strerror(errno) : ""));
      done += static_cast<uint64_t>(r);
    }
    out += n;
    size -= n;
    offset = 0;
  }
  if (size != 0) throw WeightsError("streamed experts: a tensor's byte range ends before its last expert");
}

std::vector<mx::array> ExpertStore::read_expert(const Block& block, int expert) const {
  std::vector<mx::array> out;
  out.reserve(block.tensors.size());
  for (const auto& t : block.tensors) {
    char* data = static_cast<char*>(std::malloc(std::max<uint64_t>(t.expert_bytes, 1)));
    if (!data) throw std::bad_alloc();
    try {
      read_span(t.source, static_cast<uint64_t>(expert) * t.expert_bytes, t.expert_bytes, data);
    } catch (...) {
      std::free(data);
      throw;
    }
    mx::Shape shape{1};
    shape.insert(shape.end(), t.expert_shape.begin(), t.expert_shape.end());
    out.emplace_back(static_cast<void*>(data), shape, t.dtype, [](void* p) { std::free(p); });
  }
  return out;
}

void ExpertStore::bring_in(std::unique_lock<std::mutex>& lock, int block_id, int e) {
  const uint64_t key = pack_key(block_id, e);
  const Block& block = blocks_[block_id];
  if (auto q = std::find(queued_.begin(), queued_.end(), key); q != queued_.end()) {
    queued_.erase(q);  // not started: read it here rather than wait behind other read-ahead
  } else if (reading_.count(key)) {
    read_done_.wait(lock, [&] { return reading_.count(key) == 0; });
  }
  if (lru_.touch({block_id, e})) {
    ++stats_.hits;
    if (unused_prefetch_.erase(key)) ++stats_.prefetch_hits;
    return;
  }
  ++stats_.misses;
  held_[key] = read_expert(block, e);
  stats_.bytes_read += block.expert_bytes;
  lru_.insert({block_id, e}, block.expert_bytes);
}

void ExpertStore::evict_to(uint64_t budget) {
  for (const auto& k : lru_.evict_to(budget)) {
    held_.erase(pack_key(k.block, k.expert));
    unused_prefetch_.erase(pack_key(k.block, k.expert));
  }
}

void ExpertStore::queue_prefetch(int block_id, const mx::array& guess) {
  const Block& block = blocks_[block_id];
  const uint32_t* idx = guess.data<uint32_t>();
  bool queued = false;
  for (size_t i = 0; i < guess.size(); ++i) {
    if (idx[i] >= static_cast<uint32_t>(block.num_experts)) continue;
    const int e = static_cast<int>(idx[i]);
    const uint64_t key = pack_key(block_id, e);
    // Held already: marked in use by this step, so that this round of read-ahead does not evict it.
    if (lru_.touch({block_id, e}) || reading_.count(key)) continue;
    if (std::find(queued_.begin(), queued_.end(), key) != queued_.end()) continue;
    queued_.push_back(key);
    queued = true;
  }
  if (!queued) return;
  if (!worker_.joinable()) worker_ = std::thread([this] { prefetch_loop(); });
  work_.notify_one();
}

void ExpertStore::prefetch_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    work_.wait(lock, [&] { return stopping_ || !queued_.empty(); });
    if (stopping_) return;
    const uint64_t key = queued_.front();
    queued_.pop_front();
    const int block_id = static_cast<int>(key >> 32), e = static_cast<int>(key & 0xFFFFFFFFu);
    const Block& block = blocks_[block_id];
    reading_.insert(key);
    lock.unlock();
    std::vector<mx::array> data;
    bool ok = true;
    try {
      data = read_expert(block, e);
    } catch (const std::exception&) {
      ok = false;  // the step that needs this expert reads it itself and reports the error
    }
    lock.lock();
    reading_.erase(key);
    if (ok) {
      stats_.bytes_read += block.expert_bytes;
      ++stats_.prefetched;
      // Room is made among what the current step does not use; if there is none, the read is dropped.
      if (!lru_.holds({block_id, e}) && budget_ >= block.expert_bytes) {
        evict_to(budget_ - block.expert_bytes);
        if (lru_.bytes() + block.expert_bytes <= budget_) {
          held_[key] = std::move(data);
          lru_.insert({block_id, e}, block.expert_bytes);
          unused_prefetch_.insert(key);
          stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, lru_.bytes());
        }
      }
    }
    read_done_.notify_all();
  }
}

ExpertStore::Selection ExpertStore::select(int block_id, const mx::array& indices, const std::optional<mx::array>& hidden) {
  // The router's choices decide what to read: evaluate them now (the documented cost of this mode),
  // and with them, in the same evaluation, the guess for the next block.
  auto flat = mx::flatten(indices);
  if (flat.dtype() != mx::uint32) flat = mx::astype(flat, mx::uint32);
  std::optional<mx::array> guess;
  {
    std::lock_guard lock(mutex_);
    const Block& block = blocks_.at(block_id);
    const size_t tokens = flat.size() / static_cast<size_t>(std::max(block.top_k, 1));
    const size_t next = static_cast<size_t>(block_id) + 1;
    if (prefetch_ && hidden && next < blocks_.size() && blocks_[next].predict && tokens <= kPrefetchMaxTokens &&
        budget_ >= 2 * min_budget()) {
      auto g = mx::flatten(blocks_[next].predict(*hidden));
      guess = g.dtype() == mx::uint32 ? g : mx::astype(g, mx::uint32);
    }
  }
  if (guess) mx::eval(flat, *guess);
  else mx::eval(flat);
  std::unique_lock lock(mutex_);
  const Block& block = blocks_.at(block_id);
  std::vector<char> used(block.num_experts, 0);
  const uint32_t* idx = flat.data<uint32_t>();
  for (size_t i = 0; i < flat.size(); ++i) {
    if (idx[i] >= static_cast<uint32_t>(block.num_experts))
      throw WeightsError("streamed experts: the router picked expert " + std::to_string(idx[i]) + " of " +
                         std::to_string(block.num_experts));
    used[idx[i]] = 1;
  }
  // Selected experts in ascending order: the remapping keeps the indices' order, so mlx-lm's
  // token sort (an argsort of the indices) orders the pairs exactly as before.
  std::vector<uint32_t> lut(block.num_experts, 0);
  std::vector<int> experts;
  for (int e = 0; e < block.num_experts; ++e)
    if (used[e]) {
      lut[e] = static_cast<uint32_t>(experts.size());
      experts.push_back(e);
    }

  lru_.next_step();
  for (int e : experts) bring_in(lock, block_id, e);
  stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, lru_.bytes());
  evict_to(budget_);
  std::vector<const std::vector<mx::array>*> parts;
  for (int e : experts) parts.push_back(&held_.at(pack_key(block_id, e)));

  Selection sel{mx::take(mx::array(lut.data(), {block.num_experts}, mx::uint32), indices, 0), {}};
  for (size_t t = 0; t < block.tensors.size(); ++t) {
    std::vector<mx::array> slices;
    slices.reserve(parts.size());
    for (const auto* p : parts) slices.push_back((*p)[t]);
    sel.tensors.push_back(slices.size() == 1 ? slices[0] : mx::concatenate(slices, 0));
  }
  // A step that routes to more experts than the budget holds (a long prefill) runs with all of
  // them; the compact stacks keep what they need, and the cache drops back to its budget.
  if (lru_.bytes() > budget_) {
    lru_.next_step();
    evict_to(budget_);
  }
  if (guess) queue_prefetch(static_cast<int>(block_id) + 1, *guess);
  return sel;
}

}  // namespace mlxrt::model::nn
