// Executes interpreter commands against a device, with DTE's evictions and regeneration.
// See executor.h.
#include "executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "mtc/status.h"
#include "trace/trace_writer.h"

namespace mtc {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kPutKey = 1;  // TMA's op key of a Put (ops are keyed by their schema's address)
double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// ScratchContext: kernel scratch carved from the compute region (evicting if it must),
// freed after the kernel.
class ScratchContext final : public KernelContext {
 public:
  ScratchContext(Executor& ex, const OpDef& op, bool recomputing)
      : ex_(ex), op_(op), recomputing_(recomputing) {}
  ~ScratchContext() override {
    for (const alloc::Block& b : blocks_) ex_.free_compute(b);
  }
  absl::StatusOr<void*> scratch(size_t bytes) override {
    auto b = ex_.allocate(bytes, [&] { return absl::StrCat("op ", op_.name(), ": scratch space"); },
                          /*lowest=*/false, Executor::Request::kScratch);
    if (!b.ok()) return b.status();
    blocks_.push_back(*b);
    sizes_.push_back(bytes);
    return static_cast<void*>(ex_.device().compute_ptr(*b));
  }
  const absl::InlinedVector<size_t, 2>& sizes() const { return sizes_; }
  Device& device() override { return ex_.device(); }
  bool recomputing() const override { return recomputing_; }

 private:
  Executor& ex_;
  const OpDef& op_;
  bool recomputing_;
  absl::InlinedVector<alloc::Block, 2> blocks_;
  absl::InlinedVector<size_t, 2> sizes_;
};

}  // namespace

Executor::Executor(Device& device, ExecutorOptions o)
    : device_(device), opts_(o.evict), trace_(std::move(o.trace)), simulate_(o.simulate), cost_(o.evict) {
  if (o.tma.enabled) {
    tma_ = std::make_unique<alloc::Tma>(alloc::TmaOptions{
        .warmup_iterations = o.tma.warmup_iterations,
        .plan_time_limit_sec = o.tma.plan_time_limit_sec});
  }
  if (o.bytes_per_us > 0) {
    bytes_per_us_ = o.bytes_per_us;
  } else if (opts_.reproducible || simulate_) {
    bytes_per_us_ = 1e4;  // 10 GB/s
  } else if (opts_.policy != EvictPolicy::kNone || trace_) {
    measure_bandwidth();
    refine_gamma_ = true;
  }
  if (trace_) {
    trace_->header(TraceHeader{device_type_name(device_.type()), device_.compute_region().capacity(),
                               device_.comm_region().capacity(), opts_.budget_bytes, bytes_per_us_});
  }
}

Executor::~Executor() {
  if (trace_) trace_->close().IgnoreError();  // close_trace reports; this only tidies up
  for (auto& [id, r] : records_) release_storage(r);
}

absl::Status Executor::close_trace() { return trace_ ? trace_->close() : absl::OkStatus(); }

size_t Executor::budget() const {
  const size_t cap = device_.compute_region().capacity();
  return opts_.budget_bytes == 0 ? cap : std::min(opts_.budget_bytes, cap);
}

// ---- storage states ----

void Executor::add_candidate(TensorRecord& r) {
  if (r.persistent || r.candidate_index != SIZE_MAX || r.block.size < opts_.min_candidate_bytes) return;
  r.candidate_index = candidates_.size();
  candidates_.push_back(&r);
}

void Executor::remove_candidate(TensorRecord& r) {
  if (r.candidate_index == SIZE_MAX) return;
  TensorRecord* last = candidates_.back();
  candidates_[r.candidate_index] = last;
  last->candidate_index = r.candidate_index;
  candidates_.pop_back();
  r.candidate_index = SIZE_MAX;
}

void Executor::set_resident(TensorRecord& r, alloc::Block b) {
  r.state = StorageState::kResident;
  r.block = b;
  add_candidate(r);
}

void Executor::release_storage(TensorRecord& r) {
  remove_candidate(r);
  if (r.state == StorageState::kResident) {
    if (r.in_comm) {
      device_.comm_region().free(r.block);
    } else {
      free_compute(r.block);
    }
  }
  r.in_comm = false;
  if (r.state == StorageState::kSwapped) swapped_now_ -= r.desc.bytes();
  if (r.host) give_host_buffer(r.desc.bytes(), std::move(r.host));
  if (r.state == StorageState::kResident || r.state == StorageState::kSwapped) r.state = StorageState::kDropped;
}

// droppable: r can be regenerated from its compute path: it has one, and every input of
// it is still at the version the path read.
bool Executor::droppable(const TensorRecord& r) const {
  if (r.persistent || !r.producer || !r.recomputable) return false;
  const ComputePath& p = *r.producer;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    auto it = records_.find(p.inputs[i]);
    if (it == records_.end() || it->second.version != p.input_versions[i] ||
        it->second.state == StorageState::kMissing) {
      return false;
    }
  }
  return true;
}

void Executor::rebuild_classes() {
  classes_.clear();
  for (auto& [id, r] : records_) {
    if (r.state == StorageState::kDropped && r.producer) classes_.add(id, r.producer->compute_us);
  }
  for (auto& [id, r] : records_) {
    if (!classes_.contains(id)) continue;
    for (uint64_t n : r.producer->inputs) {
      if (classes_.contains(n)) classes_.unite(id, n);
    }
  }
}

// Note [Fake delete]
// A released tensor that is still a recompute source is dropped at once only while every
// tensor computed from it is resident (or swapped): then it costs nothing unless one of
// those is evicted later, and the eviction cost sees it in their evicted neighbourhood.
// If one of them is already dropped, freeing the source now would stretch that tensor's
// recompute chain behind the cost model's back (in backward, down the whole gradient
// chain to the loss). So it stays resident, without a handle, as an ordinary candidate
// whose cost counts its own dropped neighbourhood, until it is evicted or nothing needs it.
// "Dropped" here means evicted while someone may still read it: a dropped tensor with a live
// handle, or one a dropped tensor with a live handle is computed from. Tensors that were
// only fake-deleted themselves (no handle, nothing evicted downstream) do not count, else
// an unlimited run would keep every released activation. The walk is bounded; past the
// bound it answers no, which is the plain fake delete.
bool Executor::feeds_dropped(const TensorRecord& r) const { return feeds(r, /*count_evictable=*/false, false); }

// feeds: whether some tensor a user still holds may be regenerated through r: a dropped
// one with a live handle, or (count_evictable) a resident one with a live handle that may
// be dropped later; dropped tensors without a handle are walked through, and so
// (count_evictable) are resident ones without a handle that may be dropped later. Such a
// tensor is kept only as a recompute source: what matters is whether anything held lies
// beyond it. Counting it as held took a snapshot of every parameter at an optimizer step
// whenever an activation stayed resident past its release (Note [Fake delete]), though
// the user held only the loss, which is never evicted; in drop mode the snapshots cannot
// be evicted, and a larger budget, which kept more such activations resident, ran out of
// memory where a smaller one had not (replayed ViT traces; docs/dte.md). Past 256
// tensors: `otherwise`.
bool Executor::feeds(const TensorRecord& r, bool count_evictable, bool otherwise) const {
  absl::InlinedVector<const TensorRecord*, 16> work{&r};
  absl::flat_hash_set<uint64_t> seen;
  while (!work.empty()) {
    if (seen.size() >= 256) return otherwise;
    const TensorRecord* t = work.back();
    work.pop_back();
    for (uint64_t u : t->users) {
      auto it = records_.find(u);
      if (it == records_.end()) continue;
      const TensorRecord& x = it->second;
      if (x.state == StorageState::kResident) {
        if (!count_evictable || x.candidate_index == SIZE_MAX || !droppable(x)) continue;
        if (x.handle_alive) return true;
      } else if (x.state != StorageState::kDropped) {
        continue;
      } else if (x.handle_alive) {
        return true;
      }
      if (seen.insert(u).second) work.push_back(&x);  // walk each once
    }
  }
  return false;
}

void Executor::drop(TensorRecord& r) {
  if (classes_.size() > 2 * classes_.active() + 4096) rebuild_classes();
  release_storage(r);
  r.state = StorageState::kDropped;
  // Join the evicted neighbourhood: dropped inputs and dropped users.
  classes_.add(r.id, r.producer->compute_us);
  for (uint64_t n : r.producer->inputs) {
    if (classes_.contains(n)) classes_.unite(r.id, n);
  }
  for (uint64_t n : r.users) {
    if (classes_.contains(n)) classes_.unite(r.id, n);
  }
}

absl::Status Executor::swap_out(TensorRecord& r) {
  const auto t0 = Clock::now();
  const size_t bytes = r.desc.bytes();
  if (simulate_) {
    stats_.swap_us += static_cast<double>(bytes) / bytes_per_us_;
  } else {
    std::unique_ptr<std::byte[]> host = take_host_buffer(bytes);
    if (absl::Status st = device_.copy_to_host(host.get(), data(r), bytes); !st.ok()) {
      give_host_buffer(bytes, std::move(host));
      return st;
    }
    r.host = std::move(host);
    const double us = us_since(t0);
    stats_.swap_us += us;
    note_swap_copy(bytes, us);
  }
  remove_candidate(r);
  free_compute(r.block);
  r.state = StorageState::kSwapped;
  ++stats_.evict_swap;
  stats_.swapped_out_bytes += bytes;
  swapped_now_ += bytes;
  swapped_high_ = std::max(swapped_high_, swapped_now_);
  return absl::OkStatus();
}

// Host buffers for swapped tensors are kept for reuse: a fresh one costs a page fault
// per page on first touch, which on the CPU is slower than the copy itself.
std::unique_ptr<std::byte[]> Executor::take_host_buffer(size_t bytes) {
  auto it = host_pool_.find(bytes);
  if (it == host_pool_.end()) return std::make_unique_for_overwrite<std::byte[]>(bytes);
  std::unique_ptr<std::byte[]> b = std::move(it->second);
  host_pool_.erase(it);
  host_pool_bytes_ -= bytes;
  return b;
}

void Executor::give_host_buffer(size_t bytes, std::unique_ptr<std::byte[]> b) {
  if (!b) return;
  // Keep at most as much as has been swapped out at once, and no more than 4 GiB.
  const size_t cap = std::min<size_t>(size_t{4} << 30, swapped_high_);
  if (host_pool_bytes_ + bytes > cap) return;
  host_pool_bytes_ += bytes;
  host_pool_.emplace(bytes, std::move(b));
}

void Executor::measure_bandwidth() {
  // gamma: time a device-to-host copy of up to 64 MiB of the (still empty) compute region
  // into a touched host buffer, best of 3; the peak statistics forget it. A host-to-device
  // copy first writes the region's pages: on the CPU, reading never-written pages reads
  // the kernel's one zero page, from cache, and measured several times the real rate.
  // 64 MiB is also past any CPU's last-level cache, as a swapped tensor's bytes are by the
  // time they are copied (they went stale first).
  const size_t bytes = std::min<size_t>(size_t{64} << 20, device_.compute_region().capacity() / 4);
  bytes_per_us_ = 1e4;  // 10 GB/s when nothing can be measured
  if (bytes < (size_t{64} << 10)) return;
  auto b = device_.compute_region().allocate(bytes);
  if (!b.ok()) return;
  auto host = std::make_unique<std::byte[]>(bytes);  // zeroed: its pages are touched
  double best = 1e300;
  if (device_.copy_to_device(device_.compute_ptr(*b), host.get(), bytes).ok()) {
    for (int i = 0; i < 3; ++i) {
      const auto t0 = Clock::now();
      if (!device_.copy_to_host(host.get(), device_.compute_ptr(*b), bytes).ok()) break;
      best = std::min(best, us_since(t0));
    }
  }
  free_compute(*b);
  device_.compute_region().reset_peak();
  if (best < 1e300 && best > 0) bytes_per_us_ = static_cast<double>(bytes) / best;
}

// Once real swaps have moved 64 MiB, gamma is their bandwidth: the start-up copy runs on
// an idle machine from pages just written, while real swaps copy stale tensors between
// kernels, and on the CPU they measured 2-5 GB/s below the start-up figure.
void Executor::note_swap_copy(size_t bytes, double us) {
  if (!refine_gamma_) return;
  copied_bytes_ += static_cast<double>(bytes);
  copied_us_ += us;
  if (copied_bytes_ >= static_cast<double>(size_t{64} << 20) && copied_us_ > 0) {
    bytes_per_us_ = copied_bytes_ / copied_us_;
  }
}

// ---- the eviction search ----

bool Executor::evict_one(bool fragmented) {
  if (opts_.policy == EvictPolicy::kNone || candidates_.empty()) return false;
  const auto t0 = Clock::now();
  ++stats_.searches;
  const size_t n = candidates_.size();
  // Above sample_above candidates, score a random sqrt(n) sample (at least sample_above/4).
  size_t tries = n;
  if (n > opts_.sample_above) tries = std::max<size_t>(opts_.sample_above / 4, static_cast<size_t>(std::sqrt(n)));
  TensorRecord* best = nullptr;
  evict::Score best_score;
  // scan: scores `tries` candidates (all of them when tries == n); `waiting`: also the
  // inputs pinned only while they wait for their op's other inputs (Note [Regeneration
  // order]).
  auto scan = [&](size_t count, bool waiting) {
    for (size_t k = 0; k < count; ++k) {
      TensorRecord* r = count == n ? candidates_[k] : candidates_[sample_rng_() % n];
      if (r->pin_count > 0 && !(waiting && r->pin_count == waiting_pins(*r))) continue;
      consider(r, fragmented, best, best_score);
    }
  };
  scan(tries, /*waiting=*/false);
  // A sample with nothing eligible in it says nothing of the rest: score them all.
  if (best == nullptr && tries < n) scan(n, /*waiting=*/false);
  if (best == nullptr && !waiting_pins_.empty()) scan(n, /*waiting=*/true);
  stats_.search_us += us_since(t0);
  if (best == nullptr) return false;
  if (best_score.action == evict::Action::kSwap) {
    if (!swap_out(*best).ok()) return false;
  } else {
    drop(*best);
    ++stats_.evict_drop;
  }
  if (fragmented) ++stats_.evict_fragmented;
  return true;
}

// consider: scores r and keeps it in best when the policy may evict it and it scores lower.
void Executor::consider(TensorRecord* r, bool fragmented, TensorRecord*& best, evict::Score& best_score) {
  evict::CandidateStats c;
  c.bytes = r->block.size;
  c.compute_us = r->producer ? r->producer->compute_us : 0;
  // C_s: a swap is two copies, out now and back in before the next use, and on the CPU
  // both block the op stream. Priced at one copy, mtc kept swapping where dropping was
  // cheaper once the real copies ran at 5-7 GB/s (replayed ResNet-56, 80-35%).
  c.swap_us = 2 * static_cast<double>(r->desc.bytes()) / bytes_per_us_;
  c.recompute_count = r->recompute_count;
  c.staleness = static_cast<double>(op_clock_ - r->last_access + 1);
  // The free bytes around t count only when the request failed for want of a large
  // enough block: then an eviction that merges free blocks is worth more. Over the
  // budget, any freed byte serves, and counting them made mtc evict by adjacency rather
  // than by cost (replayed ResNet-56: 1-4% more overhead at 80-25%).
  if (fragmented) {
    const alloc::FreeNeighbors fn = device_.compute_region().free_neighbors(r->block);
    c.free_left = fn.left;
    c.free_right = fn.right;
  }
  c.can_drop = droppable(*r);
  c.can_swap = true;
  if (c.can_drop) {
    absl::InlinedVector<uint64_t, 8> roots;
    auto visit = [&](uint64_t nb) {
      if (!classes_.contains(nb)) return;
      const uint64_t root = classes_.root(nb);
      if (std::find(roots.begin(), roots.end(), root) != roots.end()) return;
      roots.push_back(root);
      c.neighbourhood_us += classes_.class_cost(root);
    };
    for (uint64_t nb : r->producer->inputs) visit(nb);
    for (uint64_t nb : r->users) visit(nb);
  }
  const evict::Score s = cost_.score(c);
  if (s.eligible && (best == nullptr || s.h < best_score.h)) {
    best = r;
    best_score = s;
  }
}

uint32_t Executor::waiting_pins(const TensorRecord& r) const {
  auto it = waiting_pins_.find(&r);
  return it == waiting_pins_.end() ? 0 : it->second;
}

void Executor::free_compute(alloc::Block b) {
  device_.compute_region().free(b);
  if (tma_) tma_->freed(b);
}

absl::StatusOr<alloc::Block> Executor::allocate(size_t bytes, const std::function<std::string()>& who,
                                                bool lowest, Request request) {
  alloc::Region& region = device_.compute_region();
  const size_t size = alloc::round_up(bytes);
  const size_t m_star = budget();
  // TMA's planned offset for this request, if its plan has one: taken when that range is
  // free (a hit), else best-fit in whatever is free (a miss); see alloc/tma.h.
  const std::optional<size_t> planned = tma_ && !lowest ? tma_->propose(op_key_, size) : std::nullopt;
  std::optional<alloc::Block> got;
  for (;;) {
    const bool within_budget = region.stats().allocated + size <= m_star;
    if (within_budget) {
      if (planned) {
        if (auto b = region.allocate_at(*planned, size); b.ok()) {
          tma_->placed(op_key_, *b, /*hit=*/true);
          got = *b;
          break;
        }
      }
      auto b = lowest ? region.allocate_lowest(size) : region.allocate(size);
      if (b.ok()) {
        if (tma_) tma_->placed(op_key_, *b, /*hit=*/false);
        got = *b;
        break;
      }
    }
    if (!evict_one(/*fragmented=*/within_budget)) break;
  }
  if (!got) return out_of_memory(size, who, request);
  if (!frames_.empty() && request == Request::kOutput) frames_.back()->outputs_held += size;
  if (!frames_.empty() && request == Request::kScratch) frames_.back()->scratch_held += size;
  return *got;
}

// The message names the limit that bound: the budget m* when the request would take the
// region's allocated bytes past it, else the region itself (full, or without a free block
// large enough). It then says where the held bytes are, what the op being run still needs,
// and which flag to raise, so every tool reports the same advice.
absl::Status Executor::out_of_memory(size_t size, const std::function<std::string()>& who, Request request) const {
  const alloc::Region& region = device_.compute_region();
  const size_t held = region.stats().allocated;
  const size_t m_star = budget();
  const bool over_budget = m_star < region.capacity() && held + size > m_star;
  const OpFrame* frame = frames_.empty() ? nullptr : frames_.back();
  // Where the held bytes are: every resident tensor of the compute region by why it stayed,
  // and the rest (blocks of no tensor) the outputs and scratch of the ops being run.
  size_t own_inputs = 0, waiting = 0, persistent = 0, small = 0, kept_by_mode = 0, evictable = 0;
  for (const auto& [id, r] : records_) {
    if (r.state != StorageState::kResident || r.in_comm) continue;
    const size_t b = r.block.size;
    if (r.pin_count > 0) {
      const bool own = frame != nullptr && std::find(frame->inputs.begin(), frame->inputs.end(), &r) != frame->inputs.end();
      (own ? own_inputs : waiting) += b;
    } else if (r.persistent) {
      persistent += b;
    } else if (r.candidate_index == SIZE_MAX) {
      small += b;
    } else if (opts_.mode == EvictMode::kDrop && !droppable(r)) {
      kept_by_mode += b;
    } else {
      evictable += b;
    }
  }
  const size_t in_tensors = own_inputs + waiting + persistent + small + kept_by_mode + evictable;
  const size_t own_blocks = frame != nullptr ? frame->outputs_held + frame->scratch_held : 0;
  const size_t other_blocks = held - std::min(held, in_tensors + own_blocks);
  auto part = [](size_t bytes, absl::string_view what) {
    return bytes == 0 ? std::string() : absl::StrCat(", ", alloc::format_bytes(bytes), " ", what);
  };
  std::string where = absl::StrCat(
      alloc::format_bytes(held), " held",
      frame != nullptr ? absl::StrCat(", of which ", alloc::format_bytes(own_inputs), " pinned by this op's inputs") : "",
      part(own_blocks, "by its outputs and scratch so far"),
      part(waiting, "pinned by the ops waiting on this one's result"),
      part(other_blocks, "by the outputs and scratch of those ops"),
      part(persistent, "persistent (parameters, optimizer state, gradients)"),
      part(kept_by_mode, "not recomputable, which mode drop cannot evict"),
      part(small, absl::StrCat("in tensors under ", alloc::format_bytes(opts_.min_candidate_bytes),
                               ", which are never evicted")),
      part(evictable, "evictable, which the search did not reach"));
  std::string needs;
  if (frame != nullptr) {
    // The op's whole demand is derived here, on the error path, not on every op run.
    size_t outputs_bytes = 0, scratch_planned = 0;
    for (const TensorDesc& d : frame->outputs) outputs_bytes += alloc::round_up(d.bytes());
    for (size_t b : frame->op->recorded_scratch()) scratch_planned += alloc::round_up(b);
    const size_t outputs = outputs_bytes - std::min(outputs_bytes, frame->outputs_held);
    size_t scratch = scratch_planned - std::min(scratch_planned, frame->scratch_held);
    if (request == Request::kScratch) scratch = std::max(scratch, size);
    needs = absl::StrCat("; the op needs ", request == Request::kOther ? absl::StrCat(alloc::format_bytes(size), " for this, ") : "",
                         alloc::format_bytes(outputs), " more for its outputs and ", alloc::format_bytes(scratch),
                         " more of scratch");
  }
  const bool evicting = opts_.policy != EvictPolicy::kNone;
  std::string limit;
  if (over_budget) {
    limit = absl::StrCat("over the budget m* of ", alloc::format_bytes(m_star), ": ", where, needs,
                         evicting ? "; nothing left to evict: expected a larger --budget"
                                  : "; eviction is off: expected a larger --budget or an eviction policy");
  } else {
    limit = absl::StrCat(held + size > region.capacity() ? "the compute region of " : "no free block in the compute region of ",
                         alloc::format_bytes(region.capacity()), held + size > region.capacity() ? " is full" : " fits it",
                         " (largest free block ", alloc::format_bytes(region.largest_free()), "): ", where, needs,
                         evicting ? "; nothing left to evict: expected a larger --memory"
                                  : "; eviction is off: expected a larger --memory or an eviction policy");
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(who(), ": cannot allocate ", alloc::format_bytes(size), " (", size, " bytes): ", limit));
}

// ---- regeneration ----

absl::Status Executor::ensure_resident(TensorRecord& r) {
  switch (r.state) {
    case StorageState::kResident:
      return absl::OkStatus();
    case StorageState::kMissing:
      return absl::FailedPreconditionError(absl::StrCat("tensor ", r.desc.str(), " was never produced (an earlier op failed)"));
    case StorageState::kSwapped: {
      const uint64_t outer_key = op_key_;
      op_key_ = alloc::kSwapInKey;
      auto swapped_in = allocate(r.desc.bytes(), [&] { return absl::StrCat("swapping in ", r.desc.str()); });
      op_key_ = outer_key;
      MTC_ASSIGN_OR_RETURN(alloc::Block b, std::move(swapped_in));
      if (simulate_) {
        stats_.swap_us += static_cast<double>(r.desc.bytes()) / bytes_per_us_;
      } else {
        const auto t0 = Clock::now();
        MTC_RETURN_IF_ERROR(device_.copy_to_device(device_.compute_ptr(b), r.host.get(), r.desc.bytes()));
        const double us = us_since(t0);
        stats_.swap_us += us;
        note_swap_copy(r.desc.bytes(), us);
      }
      stats_.swapped_in_bytes += r.desc.bytes();
      swapped_now_ -= r.desc.bytes();
      give_host_buffer(r.desc.bytes(), std::move(r.host));
      set_resident(r, b);
      return absl::OkStatus();
    }
    case StorageState::kDropped:
      return recompute(r);
  }
  return absl::InternalError("bad storage state");
}

// Note [Regeneration order]
// An op's inputs are marked as just used (so the policy evicts them last), then the missing
// ones are regenerated one by one, each pinned once it is back, while inputs that were
// already resident stay evictable rather than being held through another input's
// (possibly long) recompute chain. A second pass, with everything else pinned, brings back
// any resident input evicted meanwhile. Each input is regenerated at most twice, so the
// work stays linear in the recompute chain (retrying until all fit at once would not).
// The pin of an input regenerated by the first pass is a waiting pin until the second
// pass reaches it: when nothing else can be evicted, evict_one may evict it, and the
// second pass brings it back. Without that, a recompute chain through a residual
// network's skip connections held one regenerated operand per block (every add's first
// input while the second recursed into the block before), and a larger budget, whose
// different earlier evictions led into a longer chain, ran out of memory where a smaller
// one had not (replayed ResNet-56 traces, drop mode; docs/dte.md). Such a pin yields
// only where the request would otherwise fail, so a run that fits is unchanged.
absl::Status Executor::make_resident(std::span<TensorRecord* const> ins, Pins& pins) {
  for (TensorRecord* r : ins) r->last_access = op_clock_;
  absl::InlinedVector<bool, 4> waiting(ins.size(), false);
  absl::Cleanup stop_waiting = [&] {
    for (size_t i = 0; i < ins.size(); ++i) {
      if (waiting[i]) unwait(*ins[i]);
    }
  };
  for (size_t i = 0; i < ins.size(); ++i) {
    if (ins[i]->state == StorageState::kResident) continue;
    pins.add(ins[i]);
    ++waiting_pins_[ins[i]];
    waiting[i] = true;
    MTC_RETURN_IF_ERROR(ensure_resident(*ins[i]));
  }
  for (size_t i = 0; i < ins.size(); ++i) {
    if (waiting[i]) {
      unwait(*ins[i]);
      waiting[i] = false;
    } else {
      pins.add(ins[i]);
    }
    MTC_RETURN_IF_ERROR(ensure_resident(*ins[i]));
  }
  return absl::OkStatus();
}

void Executor::unwait(const TensorRecord& r) {
  auto it = waiting_pins_.find(&r);
  if (--it->second == 0) waiting_pins_.erase(it);
}

absl::Status Executor::recompute(TensorRecord& r) {
  MTC_CHECK(r.producer != nullptr, "dropped tensor without a compute path");
  const std::shared_ptr<ComputePath> path = r.producer;  // keep it alive across erasures
  const OpDef& op = *path->op;
  const uint64_t outer_key = op_key_;
  op_key_ = alloc::recompute_key(alloc::program_op_key(reinterpret_cast<uintptr_t>(op.name())));
  absl::Cleanup restore_key = [&] { op_key_ = outer_key; };
  absl::InlinedVector<TensorRecord*, 4> ins;
  for (size_t i = 0; i < path->inputs.size(); ++i) {
    TensorRecord* in = find(path->inputs[i]);
    if (in == nullptr || in->version != path->input_versions[i]) {
      return absl::InternalError(absl::StrCat("op ", op.name(), ": cannot recompute: input ", i, " changed"));
    }
    ins.push_back(in);
  }
  absl::InlinedVector<TensorDesc, 2> out_descs;
  for (uint64_t id : path->outputs) {
    const TensorRecord* o = find(id);
    if (o != nullptr) out_descs.push_back(o->desc);
  }
  OpFrame frame{ins, &op, out_descs};
  frames_.push_back(&frame);
  absl::Cleanup pop_frame = [&] { frames_.pop_back(); };
  Pins pins;
  MTC_RETURN_IF_ERROR(make_resident(ins, pins));
  absl::InlinedVector<TensorView, 4> in_views;
  for (TensorRecord* in : ins) in_views.push_back(TensorView{data(*in), &in->desc});
  // Outputs: dropped records get their storage back; the others (resident, swapped, or
  // gone) are written to temporary blocks that are freed afterwards.
  absl::InlinedVector<TensorView, 2> out_views;
  absl::InlinedVector<TensorRecord*, 2> targets(path->outputs.size(), nullptr);
  absl::InlinedVector<alloc::Block, 2> blocks;
  absl::InlinedVector<TensorDesc, 2> temp_descs(path->outputs.size());
  auto free_blocks = [&] {
    for (const alloc::Block& b : blocks) free_compute(b);
  };
  for (size_t i = 0; i < path->outputs.size(); ++i) {
    TensorRecord* o = find(path->outputs[i]);
    if (o != nullptr && o->state == StorageState::kDropped) targets[i] = o;
    const TensorDesc* d = o != nullptr ? &o->desc : nullptr;
    if (d == nullptr) {
      // A gone output: its shape is not kept; ask the op (inputs are known).
      std::vector<TensorDesc> all;
      absl::InlinedVector<TensorDesc, 4> ins;
      for (const TensorView& v : in_views) ins.push_back(*v.desc);
      MTC_RETURN_IF_ERROR(op.infer(ins, all));
      temp_descs[i] = all[i];
      d = &temp_descs[i];
    }
    auto b = allocate(d->bytes(), [&] { return absl::StrCat("recomputing op ", op.name()); }, /*lowest=*/false,
                      Request::kOutput);
    if (!b.ok()) {
      free_blocks();
      return b.status();
    }
    blocks.push_back(*b);
    out_views.push_back(TensorView{device_.compute_ptr(*b), d});
  }
  double us = 0;
  absl::Status s = run(path, in_views, out_views, /*recomputing=*/true, &us);
  if (!s.ok()) {
    free_blocks();
    return s;
  }
  ++stats_.recomputes;
  stats_.recompute_us += us;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] == nullptr) {
      free_compute(blocks[i]);
      continue;
    }
    set_resident(*targets[i], blocks[i]);
    targets[i]->last_access = op_clock_;
    ++targets[i]->recompute_count;
    classes_.restore(targets[i]->id);
  }
  // Inputs the user has released were regenerated only for this: drop them again.
  for (uint64_t id : path->inputs) {
    TensorRecord* in = find(id);
    if (!in->handle_alive && in->pin_count == 1 && in->state == StorageState::kResident && droppable(*in) &&
        !feeds_dropped(*in)) {
      drop(*in);
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::run(const std::shared_ptr<ComputePath>& path, std::span<const TensorView> ins,
                           std::span<const TensorView> outs, bool recomputing, double* us) {
  const OpDef& op = *path->op;
  if (simulate_) {  // the recorded time, and the recorded scratch held meanwhile
    *us = std::max(0.0, op.recorded_us());
    ScratchContext ctx(*this, op, recomputing);
    for (size_t bytes : op.recorded_scratch()) MTC_RETURN_IF_ERROR(ctx.scratch(bytes).status());
    return absl::OkStatus();
  }
  KernelFn kernel = op.schema().kernels[static_cast<int>(device_.type())];
  if (kernel == nullptr) {
    return absl::UnimplementedError(absl::StrCat("op ", op.name(), " has no kernel for device ",
                                                 device_type_name(device_.type())));
  }
  ScratchContext ctx(*this, op, recomputing);
  if (device_.async_kernels()) {
    collect_timers(/*wait=*/false);
    const uint64_t timer = device_.start_timer();
    absl::Status s = kernel(op, KernelArgs{ins, outs, ctx});
    device_.stop_timer(timer);
    if (timer != 0) pending_timers_[timer] = PendingTimer{path, recomputing};  // 0: untimed
    *us = 0;
    last_scratch_.assign(ctx.sizes().begin(), ctx.sizes().end());
    return s;
  }
  const auto t0 = Clock::now();
  absl::Status s = kernel(op, KernelArgs{ins, outs, ctx});
  *us = us_since(t0);
  last_scratch_.assign(ctx.sizes().begin(), ctx.sizes().end());
  return s;
}

// collect_timers: the asynchronous device's finished op timings become their paths'
// compute_us (what DTE's cost reads) and the stats' compute and recompute times.
void Executor::collect_timers(bool wait) {
  if (pending_timers_.empty()) return;
  timers_done_.clear();
  device_.collect_timers(wait, timers_done_);
  for (const auto& [id, us] : timers_done_) {
    auto it = pending_timers_.find(id);
    if (it == pending_timers_.end()) continue;
    if (std::shared_ptr<ComputePath> p = it->second.path.lock(); p && !opts_.reproducible) p->compute_us = us;
    (it->second.recompute ? stats_.recompute_us : stats_.compute_us) += us;
    pending_timers_.erase(it);
  }
}

// ---- commands ----

absl::Status Executor::execute(Put& c) {
  op_key_ = alloc::program_op_key(kPutKey);
  MTC_ASSIGN_OR_RETURN(alloc::Block block, allocate(c.desc.bytes(), [&] {
    return absl::StrCat("put ", c.desc.str(), c.persistent ? " (persistent)" : "");
  }, /*lowest=*/c.persistent));
  if (!simulate_) MTC_RETURN_IF_ERROR(device_.copy_to_device(device_.compute_ptr(block), c.data.data(), c.data.size()));
  TensorRecord& r = records_[c.id];
  r.id = c.id;
  r.desc = std::move(c.desc);
  r.persistent = c.persistent;
  r.last_access = op_clock_;
  set_resident(r, block);
  if (trace_) trace_->put(r.id, r.desc, r.persistent);
  return absl::OkStatus();
}

absl::Status Executor::execute(ApplyOp& c) {
  const OpDef& op = *c.op;
  ++op_clock_;
  // The schema's name: one per op kind.
  op_key_ = alloc::program_op_key(reinterpret_cast<uintptr_t>(op.name()));
  Pins pins;
  absl::InlinedVector<TensorRecord*, 4> ins;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    TensorRecord* r = find(c.inputs[i]);
    if (r == nullptr || r->state == StorageState::kMissing) {
      return absl::FailedPreconditionError(absl::StrCat(
          "op ", op.name(), ": input ", i, " was never produced (an earlier op failed)"));
    }
    ins.push_back(r);
  }
  auto context = [&] {
    absl::InlinedVector<TensorDesc, 4> d;
    for (auto* r : ins) d.push_back(r->desc);
    return op_context(op, d);
  };
  OpFrame frame{ins, &op, c.output_descs};
  frames_.push_back(&frame);
  absl::Cleanup pop_frame = [&] { frames_.pop_back(); };
  if (absl::Status s = make_resident(ins, pins); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(context(), ": regenerating an input: ", s.message()));
  }
  absl::InlinedVector<TensorView, 4> in_views;
  for (TensorRecord* r : ins) {
    r->last_access = op_clock_;
    in_views.push_back(TensorView{data(*r), &r->desc});
  }

  auto path = std::make_shared<ComputePath>();
  path->op = c.op;
  path->inputs = c.inputs;
  for (TensorRecord* r : ins) path->input_versions.push_back(r->version);

  absl::InlinedVector<alloc::Block, 2> out_blocks;
  absl::InlinedVector<TensorView, 2> out_views;
  auto free_outputs = [&] {
    for (const alloc::Block& b : out_blocks) free_compute(b);
  };
  for (size_t i = 0; i < c.output_descs.size(); ++i) {
    auto b = allocate(c.output_descs[i].bytes(), [&] {
      return absl::StrCat(context(), ": output ", i, " ", c.output_descs[i].str());
    }, /*lowest=*/false, Request::kOutput);
    if (!b.ok()) {
      free_outputs();
      return b.status();
    }
    out_blocks.push_back(*b);
    out_views.push_back(TensorView{device_.compute_ptr(*b), &c.output_descs[i]});
  }
  const uint64_t mutated = op.mutates_inputs();
  if (mutated != 0 && opts_.policy != EvictPolicy::kNone) {
    for (size_t i = 0; i < ins.size(); ++i) {
      if ((mutated >> i) & 1) {
        if (absl::Status s = snapshot_before_mutation(*ins[i]); !s.ok()) {
          free_outputs();
          return absl::Status(s.code(), absl::StrCat(context(), ": ", s.message()));
        }
      }
    }
  }
  double us = 0;
  if (absl::Status s = run(path, in_views, out_views, /*recomputing=*/false, &us); !s.ok()) {
    free_outputs();
    return absl::Status(s.code(), absl::StrCat(context(), ": ", s.message()));
  }
  ++stats_.ops;
  stats_.compute_us += us;
  if (trace_) trace_->op(op, c.inputs, c.outputs, c.output_descs, us, mutated, c.recomputable, last_scratch_);
  // In-place mutation: the mutated inputs move to a new version; the path records the
  // new one (the op's outputs do not depend on the old values; see OpDef::mutates_inputs).
  // A mutated tensor no longer holds what its own compute path made.
  for (size_t i = 0; i < ins.size(); ++i) {
    if ((mutated >> i) & 1) {
      path->input_versions[i] = ++ins[i]->version;
      cut_producer(*ins[i]);
    }
  }
  path->outputs = c.outputs;
  path->compute_us = us;
  if (opts_.reproducible) {  // the op's FLOPs at 1 GFLOP/s, in microseconds
    absl::InlinedVector<TensorDesc, 4> in_d;
    for (TensorRecord* r : ins) in_d.push_back(r->desc);
    path->compute_us = op.cost(in_d, c.output_descs).flops * 1e-3 + 1.0;
  }
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    TensorRecord& r = records_[c.outputs[i]];
    r.id = c.outputs[i];
    r.desc = std::move(c.output_descs[i]);
    r.producer = path;
    r.recomputable = c.recomputable;
    r.last_access = op_clock_;
    set_resident(r, out_blocks[i]);
  }
  // Note [Gradients are not recomputed]
  // Tensors made by the backward pass are never dropped, only swapped. Regenerating a
  // gradient means rerunning the backward from the loss down to it, a chain no local cost
  // estimate bounds, and the backward's live set is small: the bulk of memory is the
  // forward activations it reads, which stay recomputable. Such tensors therefore need no
  // recompute sources and are not recorded as users of their inputs, so a gradient
  // released after use is freed at once.
  if (c.recomputable) {
    for (TensorRecord* r : ins) r->users.insert(r->users.end(), c.outputs.begin(), c.outputs.end());
  }
  return absl::OkStatus();
}

// Note [Copy on mutate]
// A compute path names its inputs by id and version. When an op is about to mutate x in
// place (an optimizer step, batch norm's running statistics) while recorded paths still
// read x's current value, a dropped tensor downstream of those paths could no longer be
// recomputed. So x's current value moves into a hidden snapshot record first (a copy, which
// DTE may swap out like any tensor), the paths are repointed to it, and x starts a new
// version with no users. The snapshot dies with the last tensor computed from it. Without
// eviction nothing is ever recomputed, and no snapshot is taken; nor is one when no tensor
// a user holds can be regenerated through x (the usual case at an optimizer step, when
// the forward's activations are all released: only the loss, too small to evict, is
// held).
absl::Status Executor::snapshot_before_mutation(TensorRecord& x) {
  // Only when something may still be regenerated from x's current value.
  if (x.users.empty() || !feeds(x, /*count_evictable=*/true, /*otherwise=*/true)) return absl::OkStatus();
  MTC_ASSIGN_OR_RETURN(alloc::Block b, allocate(x.desc.bytes(), [&] {
    return absl::StrCat("snapshot of ", x.desc.str(), " before an in-place update");
  }));
  if (!simulate_) MTC_RETURN_IF_ERROR(device_.copy_on_device(device_.compute_ptr(b), data(x), x.desc.bytes()));
  const uint64_t snap_id = kSnapshotIdBase + next_snapshot_++;
  TensorRecord& s = records_[snap_id];
  s.id = snap_id;
  s.desc = x.desc;
  s.handle_alive = false;
  s.version = x.version;
  s.last_access = x.last_access;
  s.users = std::move(x.users);
  x.users.clear();
  for (uint64_t u : s.users) {
    TensorRecord* r = find(u);
    if (r == nullptr || !r->producer) continue;
    for (uint64_t& in : r->producer->inputs) {
      if (in == x.id) in = snap_id;
    }
  }
  set_resident(s, b);
  return absl::OkStatus();
}

void Executor::erase_record(uint64_t id) {
  std::vector<uint64_t> work{id};
  while (!work.empty()) {
    const uint64_t t = work.back();
    work.pop_back();
    auto it = records_.find(t);
    if (it == records_.end()) continue;
    TensorRecord& r = it->second;
    release_storage(r);
    classes_.erase(t);
    if (r.producer) {  // it no longer uses its inputs; they may now be unneeded too
      for (uint64_t in : r.producer->inputs) {
        TensorRecord* src = find(in);
        if (src == nullptr) continue;
        auto& u = src->users;
        if (auto pos = std::find(u.begin(), u.end(), t); pos != u.end()) {
          *pos = u.back();
          u.pop_back();
        }
        if (!src->handle_alive && src->users.empty() && src->pin_count == 0) work.push_back(in);
      }
    }
    records_.erase(it);
  }
}

void Executor::cut_producer(TensorRecord& r) {
  if (!r.producer) return;
  const std::shared_ptr<ComputePath> path = std::move(r.producer);
  r.producer = nullptr;
  for (uint64_t in : path->inputs) {
    TensorRecord* src = find(in);
    if (src == nullptr) continue;
    auto& u = src->users;
    if (auto pos = std::find(u.begin(), u.end(), r.id); pos != u.end()) {
      *pos = u.back();
      u.pop_back();
    }
    if (!src->handle_alive && src->users.empty() && src->pin_count == 0) erase_record(in);
  }
}

absl::Status Executor::execute(MakeGradient& c) {
  TensorRecord* r = find(c.id);
  if (r == nullptr || r->state == StorageState::kMissing) return absl::OkStatus();  // its op failed
  if (trace_) trace_->gradient(c.id);
  MTC_RETURN_IF_ERROR(ensure_resident(*r));
  remove_candidate(*r);
  r->persistent = true;
  if (!r->in_comm) {
    // To the comm/gradient region when it fits; else it stays, unevictable, in m2.
    if (auto b = device_.comm_region().allocate(r->block.size); b.ok()) {
      if (!simulate_) {
        MTC_RETURN_IF_ERROR(device_.copy_on_device(device_.comm_ptr(*b), device_.compute_ptr(r->block), r->desc.bytes()));
      }
      free_compute(r->block);
      r->block = *b;
      r->in_comm = true;
    }
  }
  cut_producer(*r);
  return absl::OkStatus();
}

absl::Status Executor::execute(Mark& c) {
  if (trace_) trace_->mark(c.label, c.index);
  if (tma_) {
    // An iteration boundary: an explicit "iteration" mark, or, for a program that never
    // makes one, the optimizer's "step".
    const std::string_view label = c.label;
    if (label == "iteration") saw_iteration_mark_ = true;
    if (label == "iteration" || (label == "step" && !saw_iteration_mark_)) {
      tma_->boundary(device_.compute_region());
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::execute(Del& c) {
  TensorRecord* r = find(c.id);
  if (r == nullptr) return absl::OkStatus();  // its op failed: nothing was made
  if (trace_) trace_->release(c.id);
  r->handle_alive = false;
  if (r->users.empty()) {
    erase_record(c.id);
  } else if (r->state == StorageState::kResident && droppable(*r) && !feeds_dropped(*r)) {
    // Still a recompute source for tensors computed from it ("fake delete"): keep the
    // record, free the storage. Note [Fake delete]
    drop(*r);
  }
  return absl::OkStatus();
}

absl::Status Executor::execute(GetValue& c) {
  TensorRecord* r = find(c.id);
  if (r == nullptr || r->state == StorageState::kMissing) {
    return absl::FailedPreconditionError("get_value: the tensor was never produced (an earlier op failed)");
  }
  if (trace_) trace_->read(c.id);
  MTC_RETURN_IF_ERROR(ensure_resident(*r));
  MTC_CHECK(c.bytes == r->desc.bytes(), "get_value size mismatch");
  if (simulate_) return absl::OkStatus();
  return device_.copy_to_host(c.dst, data(*r), c.bytes);
}

}  // namespace mtc
