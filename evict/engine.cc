// DTE's eviction engine: the records and candidates, the eviction search, drop, swap out
// and in, regeneration, fake delete and copy-on-mutate snapshots. See engine.h.
#include "evict/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mtc/status.h"

namespace mtc {

void HostBytesFree::operator()(std::byte* p) const { host->free_host(p); }

namespace evict {
namespace {

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

}  // namespace

Engine::Engine(Host& host, const EngineOptions& o)
    : host_(host), opts_(o.evict), simulate_(o.simulate), cost_(o.evict) {
  if (o.bytes_per_us > 0) {
    bytes_per_us_ = o.bytes_per_us;
  } else if (opts_.reproducible || simulate_) {
    bytes_per_us_ = 1e4;  // 10 GB/s
  } else if (opts_.policy != EvictPolicy::kNone || o.trace) {
    measure_bandwidth();
    refine_gamma_ = !host_.copies_async();  // an asynchronous copy's host time is not its cost
  }
}

void Engine::set_score(const EvictOptions& o) {
  opts_.policy = o.policy;
  opts_.beta = o.beta;
  opts_.beta_max_power = o.beta_max_power;
  opts_.free_room = o.free_room;
  cost_ = EvictionCost(opts_);
}

void Engine::release_all() {
  for (auto& [id, r] : records_) release_storage(r);
}

TensorRecord& Engine::add(uint64_t id) {
  TensorRecord& r = records_[id];
  r.id = id;
  return r;
}

// ---- storage states ----

void Engine::add_candidate(TensorRecord& r) {
  if (r.persistent || r.candidate_index != SIZE_MAX || r.block.size < opts_.min_candidate_bytes) return;
  r.candidate_index = candidates_.size();
  candidates_.push_back(&r);
}

void Engine::remove_candidate(TensorRecord& r) {
  if (r.candidate_index == SIZE_MAX) return;
  TensorRecord* last = candidates_.back();
  candidates_[r.candidate_index] = last;
  last->candidate_index = r.candidate_index;
  candidates_.pop_back();
  r.candidate_index = SIZE_MAX;
}

void Engine::set_resident(TensorRecord& r, alloc::Block b) {
  if (r.pin_count > 0 && r.state != StorageState::kResident) pinned_.add(b.size);  // regenerated while pinned
  r.state = StorageState::kResident;
  r.block = b;
  add_candidate(r);
}

void Engine::release_storage(TensorRecord& r) {
  remove_candidate(r);
  if (r.state == StorageState::kResident) {
    if (r.pin_count > 0) pinned_.sub(r.block.size);
    if (r.in_comm) {
      host_.comm_region().free(r.block);
    } else {
      host_.free_compute(r.block);
    }
  }
  r.in_comm = false;
  if (r.state == StorageState::kSwapped) swapped_now_ -= r.desc.bytes();
  if (r.host) give_host_buffer(r.desc.bytes(), std::move(r.host));
  if (r.state == StorageState::kResident || r.state == StorageState::kSwapped) r.state = StorageState::kDropped;
}

// droppable: r can be regenerated from its compute path: it has one, and every input of
// it is still at the version the path read.
bool Engine::droppable(const TensorRecord& r) const {
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

void Engine::rebuild_classes() {
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
bool Engine::feeds_dropped(const TensorRecord& r) const { return feeds(r, /*count_evictable=*/false, false); }

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
bool Engine::feeds(const TensorRecord& r, bool count_evictable, bool otherwise) const {
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

void Engine::drop(TensorRecord& r) {
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

absl::Status Engine::swap_out(TensorRecord& r) {
  const auto t0 = Clock::now();
  const size_t bytes = r.desc.bytes();
  if (simulate_) {
    stats_.swap_us += static_cast<double>(bytes) / bytes_per_us_;
  } else {
    HostBytes host = take_host_buffer(bytes);
    if (!host) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot take ", alloc::format_bytes(bytes), " of host memory to swap ", r.desc.str(), " out"));
    }
    if (absl::Status st = host_.swap_out(host.get(), host_.data(r), bytes); !st.ok()) {
      give_host_buffer(bytes, std::move(host));
      return st;
    }
    r.host = std::move(host);
    note_swap_copy(bytes, us_since(t0));
  }
  remove_candidate(r);
  if (r.pin_count > 0) pinned_.sub(r.block.size);  // a waiting pin yielded (Note [Regeneration order])
  host_.free_compute(r.block);
  r.state = StorageState::kSwapped;
  ++stats_.evict_swap;
  stats_.swapped_out_bytes += bytes;
  swapped_now_ += bytes;
  swapped_high_ = std::max(swapped_high_, swapped_now_);
  return absl::OkStatus();
}

// Host buffers for swapped tensors are kept for reuse: a fresh one costs a page fault
// per page on first touch, which on the CPU is slower than the copy itself, and pinning
// on a GPU costs more. Null when the host has none to give.
HostBytes Engine::take_host_buffer(size_t bytes) {
  auto it = host_pool_.find(bytes);
  if (it == host_pool_.end()) return HostBytes(host_.alloc_host(bytes), HostBytesFree{&host_});
  HostBytes b = std::move(it->second);
  host_pool_.erase(it);
  host_pool_bytes_ -= bytes;
  return b;
}

void Engine::give_host_buffer(size_t bytes, HostBytes b) {
  if (!b) return;
  // Keep at most as much as has been swapped out at once, and no more than 4 GiB.
  const size_t cap = std::min<size_t>(size_t{4} << 30, swapped_high_);
  if (host_pool_bytes_ + bytes > cap) return;
  host_pool_bytes_ += bytes;
  host_pool_.emplace(bytes, std::move(b));
}

void Engine::measure_bandwidth() {
  // gamma: time a device-to-host copy of up to 64 MiB of the (still empty) compute region
  // into a touched host buffer, best of 3; the peak statistics forget it. A host-to-device
  // copy first writes the region's pages: on the CPU, reading never-written pages reads
  // the kernel's one zero page, from cache, and measured several times the real rate.
  // 64 MiB is also past any CPU's last-level cache, as a swapped tensor's bytes are by the
  // time they are copied (they went stale first).
  const size_t bytes = std::min<size_t>(size_t{64} << 20, host_.compute_region().capacity() / 4);
  bytes_per_us_ = 1e4;  // 10 GB/s when nothing can be measured
  if (bytes < (size_t{64} << 10)) return;
  auto b = host_.compute_region().allocate(bytes);
  if (!b.ok()) return;
  double best = 1e300;
  if (host_.copies_async()) {
    // The swaps' own path (pinned memory), each copy waited for: what a swap costs the
    // kernels queued after it.
    HostBytes pinned(host_.alloc_host(bytes), HostBytesFree{&host_});
    if (pinned && host_.swap_in(host_.compute_ptr(*b), pinned.get(), bytes).ok() && host_.synchronize().ok()) {
      for (int i = 0; i < 3; ++i) {
        const auto t0 = Clock::now();
        if (!host_.swap_out(pinned.get(), host_.compute_ptr(*b), bytes).ok() || !host_.synchronize().ok()) break;
        best = std::min(best, us_since(t0));
      }
    }
  } else {
    auto host = std::make_unique<std::byte[]>(bytes);  // zeroed: its pages are touched
    if (host_.copy_to_device(host_.compute_ptr(*b), host.get(), bytes).ok()) {
      for (int i = 0; i < 3; ++i) {
        const auto t0 = Clock::now();
        if (!host_.copy_to_host(host.get(), host_.compute_ptr(*b), bytes).ok()) break;
        best = std::min(best, us_since(t0));
      }
    }
  }
  host_.free_compute(*b);
  host_.compute_region().reset_peak();
  if (best < 1e300 && best > 0) bytes_per_us_ = static_cast<double>(bytes) / best;
}

// note_swap_copy: a swap's copy of `bytes` that held the host `us`, counted in swap_us.
// Once real swaps have moved 64 MiB, gamma is their bandwidth: the start-up copy runs on
// an idle machine from pages just written, while real swaps copy stale tensors between
// kernels, and on the CPU they measured 2-5 GB/s below the start-up figure.
void Engine::note_swap_copy(size_t bytes, double us) {
  // An asynchronous copy (Note [Swaps without waiting], src/kernels/cuda/cuda_device.cc)
  // costs the kernels after it its transfer at gamma, not the host's time to queue it.
  stats_.swap_us += host_.copies_async() ? static_cast<double>(bytes) / bytes_per_us_ : us;
  if (!refine_gamma_) return;
  copied_bytes_ += static_cast<double>(bytes);
  copied_us_ += us;
  if (copied_bytes_ >= static_cast<double>(size_t{64} << 20) && copied_us_ > 0) {
    bytes_per_us_ = copied_bytes_ / copied_us_;
  }
}

// ---- the eviction search ----

bool Engine::evict_one(bool fragmented) {
  if (opts_.policy == EvictPolicy::kNone || candidates_.empty()) return false;
  const auto t0 = Clock::now();
  ++stats_.searches;
  const size_t n = candidates_.size();
  // Above sample_above candidates, score a random sqrt(n) sample (at least sample_above/4).
  size_t tries = n;
  if (n > opts_.sample_above) tries = std::max<size_t>(opts_.sample_above / 4, static_cast<size_t>(std::sqrt(n)));
  TensorRecord* best = nullptr;
  Score best_score;
  // scan: scores `tries` candidates (all of them when tries == n); `waiting`: also the
  // inputs pinned only while they wait for their op's other inputs (Note [Regeneration
  // order]); `kept`: drop tensors kept for this op too (Note [Recompute cycles]).
  auto scan = [&](size_t count, bool waiting, bool kept) {
    for (size_t k = 0; k < count; ++k) {
      TensorRecord* r = count == n ? candidates_[k] : candidates_[sample_rng_() % n];
      if (r->pin_count > 0 && !(waiting && r->pin_count == waiting_pins(*r))) continue;
      consider(r, fragmented, /*no_drop=*/!kept && kept_for_this_op(*r), best, best_score);
    }
  };
  scan(tries, /*waiting=*/false, /*kept=*/false);
  // A sample with nothing eligible in it says nothing of the rest: score them all.
  if (best == nullptr && tries < n) scan(n, /*waiting=*/false, /*kept=*/false);
  if (best == nullptr && kept_now_ > 0) scan(n, /*waiting=*/false, /*kept=*/true);
  if (best == nullptr && !waiting_pins_.empty()) scan(n, /*waiting=*/true, /*kept=*/true);
  stats_.search_us += us_since(t0);
  if (best == nullptr) return false;
  if (best_score.action == Action::kSwap) {
    if (!swap_out(*best).ok()) return false;
  } else {
    drop(*best);
    ++stats_.evict_drop;
  }
  if (fragmented) ++stats_.evict_fragmented;
  return true;
}

// Note [Compaction]
// With the compute region itself as the limit, a request can find the free bytes it needs
// split among blocks none of which holds it. Evicting until one does frees tensors that
// need not go (their bytes land in the wrong place), and where everything that splits the
// free bytes is pinned (the inputs of the op being run and of the ops waiting on it),
// persistent or the op's own outputs, eviction can do nothing at all: the run stopped out
// of memory where a byte budget of the same size trained (replayed ViT-tiny at 20% of its
// peak: gelu_grad asked 32 MiB beside its two pinned 32 MiB inputs with 58 MiB free, the
// largest block 31 MiB). So resident tensors move. Live blocks are read in address order;
// blocks that are not a movable tensor's (outputs and scratch of the ops being run, the
// inputs of a kernel running now, and tensors whose bytes work in flight still uses,
// OpDef::holds_inputs) split the region into segments. Persistent tensors move too: a
// gradient the comm region could not take stays where the backward made it, anywhere in
// the region, and kept apart the free bytes around it (a replayed DenseNet-121 in drop
// mode at 15% of its peak, with the region as the limit, ran out of memory there on two
// recordings; with them moving and with repacking, below, it trains at 3.4% and 2.3%
// over the byte budget's figure).
// Inside a segment, a window of consecutive free gaps and movable blocks becomes one free
// block in one of two ways, and the plan copies the fewest bytes:
//  - sliding: the window's gaps add up to the request, and its blocks slide down to the
//    window's start (each into the free bytes below it and its own old range: the copy may
//    overlap, which copy_on_device allows);
//  - evacuation: the window, gaps and blocks, is at least the request, and its blocks move
//    out into free gaps outside it (best fit, largest first), so free bytes in another
//    segment serve too.
// Where neither serves (no segment's gaps add up to the request, and no window's blocks
// fit the gaps outside it as they lie), repacking: the segments' blocks pack to their
// starts, and one segment sends its smallest blocks into the others' packed free bytes
// until it holds the request (plan_compaction).
// When (Executor::allocate): with move_when_cheaper (the default), as soon as a request
// finds no block, if kMoveMargin times the plan's copy (bytes / gamma) costs less than the
// cheapest run of adjacent evictions that would free such a block (each tensor's
// recompute or swap time, as its score would evict it: eviction_window_us); otherwise,
// and always, as the last resort once nothing more can be evicted. The margin: an
// eviction frees its bytes for the requests after this one too, a move frees nothing.
// Replayed with the region as the limit (six recordings of nine models, docs/dte.md "At
// the low end"), drop mode, region cells more than 5% above the byte budget's figure /
// cells out of memory where dtr trains: margin 1: 11 / 6, 2: 11 / 4, 4: 7 / 2, 8: 9 / 3,
// 16: 15 / 3; moving only as the last resort (sliding only, as before): 34 / 3. In mode
// both the region's worst cell against the budget was 1.050x at margin 1 and 1.017x at 4
// (1.016x before).
// The region keeps its books; a move is priced like a swap's one copy (bytes / gamma) in
// a replay.
std::vector<Engine::Slot> Engine::layout(std::span<const alloc::Block> live,
                                         const absl::flat_hash_map<size_t, TensorRecord*>& owner) const {
  const size_t capacity = host_.compute_region().capacity();
  std::vector<Slot> slots;
  size_t pos = 0;
  for (const alloc::Block& b : live) {
    if (b.offset > pos) slots.push_back(Slot{pos, b.offset - pos, true, nullptr});
    auto it = owner.find(b.offset);
    const bool owned = it != owner.end() && it->second->block.size == b.size;
    slots.push_back(Slot{b.offset, b.size, false, owned ? it->second : nullptr});
    pos = b.offset + b.size;
  }
  if (capacity > pos) slots.push_back(Slot{pos, capacity - pos, true, nullptr});
  return slots;
}

Engine::CompactionPlan Engine::plan_compaction(size_t bytes, std::span<TensorRecord* const> in_use,
                                               std::span<const alloc::Block> live) {
  alloc::Region& region = host_.compute_region();
  const size_t need = alloc::round_up(bytes);
  CompactionPlan plan;
  if (region.capacity() - region.stats().allocated < need || region.largest_free() >= need) return plan;
  absl::flat_hash_map<size_t, TensorRecord*> owner = movable_by_offset(/*move_pinned=*/true);
  for (TensorRecord* r : in_use) {
    auto it = owner.find(r->block.offset);
    if (it != owner.end() && it->second == r) owner.erase(it);
  }
  enum class Kind : uint8_t { kGap, kMovable, kFixed };
  struct Item {
    Kind kind;
    size_t offset, size;
    TensorRecord* r;
  };
  std::vector<Item> items;
  for (const Slot& x : layout(live, owner)) {
    items.push_back(Item{x.gap ? Kind::kGap : x.r ? Kind::kMovable : Kind::kFixed, x.offset, x.size, x.r});
  }

  // Sliding: the window whose blocks hold the fewest bytes (two pointers).
  size_t slide_l = 0, slide_r = 0, slide_moved = SIZE_MAX;
  {
    size_t l = 0, free_sum = 0, moved_sum = 0;
    for (size_t r = 0; r < items.size(); ++r) {
      const Item& it = items[r];
      if (it.kind == Kind::kFixed) {
        l = r + 1;
        free_sum = moved_sum = 0;
        continue;
      }
      (it.kind == Kind::kGap ? free_sum : moved_sum) += it.size;
      // Shrink from the left: a leading block is never needed, a leading gap only when the
      // rest still holds the request.
      while (l < r && (items[l].kind == Kind::kMovable || free_sum - items[l].size >= need)) {
        (items[l].kind == Kind::kGap ? free_sum : moved_sum) -= items[l].size;
        ++l;
      }
      if (it.kind == Kind::kGap && free_sum >= need && moved_sum < slide_moved) {
        slide_l = l;
        slide_r = r;
        slide_moved = moved_sum;
      }
    }
  }

  // Evacuation: the shortest window ending at each item whose span holds the request, by
  // the bytes its blocks hold, the cheapest first; the first whose blocks all find a gap
  // outside it wins. Tried for at most kEvacuationTries windows.
  constexpr int kEvacuationTries = 32;
  struct Window {
    size_t moved, l, r;
  };
  std::vector<Window> windows;
  {
    size_t l = 0, span = 0, moved = 0;
    for (size_t r = 0; r < items.size(); ++r) {
      if (items[r].kind == Kind::kFixed) {
        l = r + 1;
        span = moved = 0;
        continue;
      }
      span += items[r].size;
      if (items[r].kind == Kind::kMovable) moved += items[r].size;
      while (l < r && span - items[l].size >= need) {
        span -= items[l].size;
        if (items[l].kind == Kind::kMovable) moved -= items[l].size;
        ++l;
      }
      if (span >= need && moved < slide_moved) windows.push_back(Window{moved, l, r});
    }
  }
  std::sort(windows.begin(), windows.end(), [](const Window& a, const Window& b) { return a.moved < b.moved; });
  if (windows.size() > kEvacuationTries) windows.resize(kEvacuationTries);
  for (const Window& w : windows) {
    std::set<std::pair<size_t, size_t>> gaps;  // (size, offset), outside the window
    for (size_t k = 0; k < items.size(); ++k) {
      if ((k < w.l || k > w.r) && items[k].kind == Kind::kGap) gaps.emplace(items[k].size, items[k].offset);
    }
    std::vector<const Item*> blocks;
    for (size_t k = w.l; k <= w.r; ++k) {
      if (items[k].kind == Kind::kMovable) blocks.push_back(&items[k]);
    }
    std::sort(blocks.begin(), blocks.end(), [](const Item* a, const Item* b) { return a->size > b->size; });
    plan.moves.clear();
    for (const Item* b : blocks) {
      auto g = gaps.lower_bound({b->size, 0});
      if (g == gaps.end()) break;
      const auto [gap_size, gap_offset] = *g;
      gaps.erase(g);
      if (gap_size > b->size) gaps.emplace(gap_size - b->size, gap_offset + b->size);
      plan.moves.emplace_back(b->r, gap_offset);
    }
    if (plan.moves.size() == blocks.size()) {
      plan.moved = w.moved;
      return plan;
    }
  }
  plan.moves.clear();
  if (slide_moved == SIZE_MAX) {
    // Repacking: no segment's free bytes hold the request. Every segment's blocks pack to its
    // start, so its free bytes become one gap at its end; one segment sends out its smallest
    // blocks until the rest and the request fit in it, each to the packed gap of another
    // segment (best fit, largest first). Each segment is tried as the sender; the plan that
    // copies the fewest bytes wins. The moves in their order: the receiving segments pack,
    // the blocks leave, the sending segment packs.
    struct Segment {
      size_t begin = 0, end = 0, movable = 0;
      std::vector<const Item*> blocks;  // movable, by offset
      size_t free() const { return end - begin - movable; }
    };
    std::vector<Segment> segments(1);
    for (const Item& it : items) {
      if (it.kind == Kind::kFixed) {
        segments.push_back(Segment{it.offset + it.size, it.offset + it.size, 0, {}});
        continue;
      }
      Segment& g = segments.back();
      g.end = it.offset + it.size;
      if (it.kind == Kind::kMovable) {
        g.blocks.push_back(&it);
        g.movable += it.size;
      }
    }
    const auto plan_from = [&](size_t send) {
      CompactionPlan p;
      const Segment& from = segments[send];
      if (from.end - from.begin < need) return p;
      std::vector<const Item*> out(from.blocks);
      std::sort(out.begin(), out.end(), [](const Item* x, const Item* y) { return x->size < y->size; });
      size_t freed = from.free(), n_out = 0;
      while (freed < need && n_out < out.size()) freed += out[n_out++]->size;
      if (freed < need) return p;
      out.resize(n_out);
      std::sort(out.begin(), out.end(), [](const Item* x, const Item* y) { return x->size > y->size; });
      std::set<std::pair<size_t, size_t>> room;  // (free bytes, segment) of the receivers
      for (size_t k = 0; k < segments.size(); ++k) {
        if (k != send && segments[k].free() > 0) room.emplace(segments[k].free(), k);
      }
      std::vector<std::vector<const Item*>> to(segments.size());
      for (const Item* x : out) {
        auto r = room.lower_bound({x->size, 0});
        if (r == room.end()) return p;
        const auto [left, k] = *r;
        room.erase(r);
        if (left > x->size) room.emplace(left - x->size, k);
        to[k].push_back(x);
      }
      size_t moved = 0;
      const auto pack = [&](const Segment& g, const absl::flat_hash_set<const Item*>& skip) {
        size_t cursor = g.begin;
        for (const Item* x : g.blocks) {
          if (skip.contains(x)) continue;
          if (x->offset != cursor) {
            p.moves.emplace_back(x->r, cursor);
            moved += x->size;
          }
          cursor += x->size;
        }
        return cursor;
      };
      for (size_t k = 0; k < segments.size(); ++k) {
        if (to[k].empty()) continue;
        size_t cursor = pack(segments[k], {});
        for (const Item* x : to[k]) {
          p.moves.emplace_back(x->r, cursor);
          moved += x->size;
          cursor += x->size;
        }
      }
      pack(from, absl::flat_hash_set<const Item*>(out.begin(), out.end()));
      p.moved = moved;
      return p;
    };
    for (size_t send = 0; send < segments.size(); ++send) {
      CompactionPlan p = plan_from(send);
      if (p.moved < plan.moved) plan = std::move(p);
    }
    return plan;
  }
  plan.moved = slide_moved;
  size_t cursor = items[slide_l].offset;
  for (size_t k = slide_l; k <= slide_r; ++k) {
    const Item& it = items[k];
    if (it.kind != Kind::kMovable) continue;
    if (it.offset != cursor) plan.moves.emplace_back(it.r, cursor);
    cursor += it.size;
  }
  return plan;
}

bool Engine::compact(size_t bytes, std::span<TensorRecord* const> in_use) {
  return run_compaction(plan_compaction(bytes, in_use, host_.compute_region().live_blocks()), bytes);
}

constexpr double kMoveMargin = 4;  // Note [Compaction]

bool Engine::compact_if_cheaper(size_t bytes, std::span<TensorRecord* const> in_use) {
  if (!opts_.move_when_cheaper) return false;
  const auto t0 = Clock::now();
  const std::vector<alloc::Block> live = host_.compute_region().live_blocks();
  CompactionPlan plan = plan_compaction(bytes, in_use, live);
  const bool cheaper = plan.moved != SIZE_MAX &&
                       kMoveMargin * static_cast<double>(plan.moved) / bytes_per_us_ < eviction_window_us(bytes, live);
  stats_.search_us += us_since(t0);
  return cheaper && run_compaction(plan, bytes);
}

bool Engine::run_compaction(const CompactionPlan& plan, size_t bytes) {
  if (plan.moved == SIZE_MAX) return false;
  const auto t0 = Clock::now();
  size_t copied = 0;
  for (const auto& [r, offset] : plan.moves) {
    // A failed copy leaves the region as it was before this block.
    if (!move_to(*r, offset, copied)) break;
  }
  count_moves(copied, t0);
  return host_.compute_region().largest_free() >= alloc::round_up(bytes);
}

// eviction_window_us: Note [Compaction]. The window is a run of free gaps and tensors the
// policy may evict now (unpinned candidates), with no other block in it.
double Engine::eviction_window_us(size_t bytes, std::span<const alloc::Block> live) {
  if (opts_.policy == EvictPolicy::kNone || candidates_.empty()) return kNoWindow;
  const size_t need = alloc::round_up(bytes);
  absl::flat_hash_map<size_t, TensorRecord*> evictable;
  for (TensorRecord* r : candidates_) {
    if (r->pin_count == 0) evictable.emplace(r->block.offset, r);
  }
  struct Item {
    bool fixed;
    size_t size;
    double us;
  };
  std::vector<Item> items;
  for (const Slot& x : layout(live, evictable)) {
    Item item{!x.gap, x.size, 0};
    if (x.r != nullptr) {
      CandidateStats c;
      const Score s = score_of(*x.r, &c);
      if (s.eligible) item = Item{false, x.size, s.action == Action::kDrop ? c.compute_us + c.neighbourhood_us : c.swap_us};
    }
    items.push_back(item);
  }
  double best = kNoWindow;
  size_t l = 0, span = 0;
  double us = 0;
  for (size_t r = 0; r < items.size(); ++r) {
    if (items[r].fixed) {
      l = r + 1;
      span = 0;
      us = 0;
      continue;
    }
    span += items[r].size;
    us += items[r].us;
    while (l < r && span - items[l].size >= need) {
      span -= items[l].size;
      us -= items[l].us;
      ++l;
    }
    if (span >= need) best = std::min(best, us);
  }
  return best;
}

absl::flat_hash_map<size_t, TensorRecord*> Engine::movable_by_offset(bool move_pinned) {
  absl::flat_hash_map<size_t, TensorRecord*> owner;
  for (auto& [id, r] : records_) {
    if (r.state == StorageState::kResident && !r.in_comm && r.address_holds == 0 && (move_pinned || r.pin_count == 0)) {
      owner.emplace(r.block.offset, &r);
    }
  }
  return owner;
}

bool Engine::move_to(TensorRecord& r, size_t offset, size_t& copied) {
  absl::StatusOr<alloc::Block> to = host_.move_compute(r.block, offset);
  if (!to.ok()) return false;
  r.block = *to;
  copied += r.desc.bytes();
  return true;
}

void Engine::count_moves(size_t copied, Clock::time_point t0) {
  ++stats_.compactions;
  stats_.moved_bytes += copied;
  stats_.move_us += simulate_ ? static_cast<double>(copied) / bytes_per_us_ : us_since(t0);
}

void Engine::pack_low() {
  alloc::Region& region = host_.compute_region();
  const absl::flat_hash_map<size_t, TensorRecord*> owner = movable_by_offset(/*move_pinned=*/false);
  const auto t0 = Clock::now();
  size_t cursor = 0, copied = 0;
  for (const alloc::Block& b : region.live_blocks()) {
    auto it = owner.find(b.offset);
    if (it == owner.end() || it->second->block.size != b.size || b.offset == cursor) {
      cursor = b.offset + b.size;  // not a tensor's, or already in place
      continue;
    }
    if (!move_to(*it->second, cursor, copied)) return;  // the device failed the copy: the rest stay
    cursor += b.size;
  }
  if (copied > 0) count_moves(copied, t0);
}

Score Engine::score_of(TensorRecord& r, CandidateStats* stats) {
  TensorRecord* best = nullptr;
  Score s;
  consider(&r, /*fragmented=*/false, /*no_drop=*/kept_for_this_op(r), best, s, stats);
  return s;
}

// consider: scores r and keeps it in best when the policy may evict it and it scores lower.
void Engine::consider(TensorRecord* r, bool fragmented, bool no_drop, TensorRecord*& best, Score& best_score,
                      CandidateStats* out) {
  CandidateStats c;
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
    const alloc::FreeNeighbors fn = host_.compute_region().free_neighbors(r->block);
    c.free_left = fn.left;
    c.free_right = fn.right;
  }
  c.can_drop = !no_drop && droppable(*r);
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
  const Score s = cost_.score(c);
  if (out) *out = c;
  if (s.eligible && (best == nullptr || s.h < best_score.h)) {
    best = r;
    best_score = s;
  }
}

uint32_t Engine::waiting_pins(const TensorRecord& r) const {
  auto it = waiting_pins_.find(&r);
  return it == waiting_pins_.end() ? 0 : it->second;
}

// held: the out-of-memory message's account of the compute region's resident tensors, by
// why each stayed.
HeldBytes Engine::held(std::span<TensorRecord* const> own_inputs) const {
  HeldBytes h;
  for (const auto& [id, r] : records_) {
    if (r.state != StorageState::kResident || r.in_comm) continue;
    const size_t b = r.block.size;
    if (r.pin_count > 0) {
      const bool own = std::find(own_inputs.begin(), own_inputs.end(), &r) != own_inputs.end();
      (own ? h.own_inputs : h.waiting) += b;
    } else if (r.persistent) {
      h.persistent += b;
    } else if (r.candidate_index == SIZE_MAX) {
      h.small += b;
    } else if (opts_.mode == EvictMode::kDrop && !droppable(r)) {
      h.kept_by_mode += b;
    } else {
      h.evictable += b;
    }
  }
  return h;
}

TensorBytes Engine::tensor_bytes() const {
  TensorBytes t;
  for (const auto& [id, r] : records_) {
    switch (r.state) {
      case StorageState::kResident:
        if (r.persistent && !r.in_comm) t.persistent += r.block.size;
        break;
      case StorageState::kSwapped:
        if (r.handle_alive) t.swapped += r.desc.bytes();
        break;
      case StorageState::kDropped:
        if (r.handle_alive) t.dropped += r.desc.bytes();
        break;
      case StorageState::kMissing:
        break;
    }
  }
  return t;
}

// ---- regeneration ----

absl::Status Engine::ensure_resident(TensorRecord& r) {
  switch (r.state) {
    case StorageState::kResident:
      return absl::OkStatus();
    case StorageState::kMissing:
      return absl::FailedPreconditionError(absl::StrCat("tensor ", r.desc.str(), " was never produced (an earlier op failed)"));
    case StorageState::kSwapped: {
      MTC_RETURN_IF_ERROR(check_overhead(r));
      MTC_ASSIGN_OR_RETURN(alloc::Block b, host_.claim(r.desc.bytes(), [&] {
        return absl::StrCat("swapping in ", r.desc.str());
      }, Claim::kSwapIn));
      if (simulate_) {
        stats_.swap_us += static_cast<double>(r.desc.bytes()) / bytes_per_us_;
      } else {
        const auto t0 = Clock::now();
        MTC_RETURN_IF_ERROR(host_.swap_in(host_.compute_ptr(b), r.host.get(), r.desc.bytes()));
        note_swap_copy(r.desc.bytes(), us_since(t0));
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

// Note [Planned regeneration]
// Regenerating inputs one by one, each down its own chain (recompute's recursion), meets
// the tensors the chains share in the wrong order: a Tree-LSTM's node state c is read by
// its own h and by its parent's c, and the parent's h regenerates its output gate's
// branch (the children's h, their whole subtrees) before the branch of c; the children's
// states regenerated for the first branch were the oldest resident tensors by the time
// the second branch needed them, evicted meanwhile, and regenerated again with their
// subtrees, at every level of the tree. Replayed in drop mode at 50% of its peak, one
// linear_backward_weight recomputed 1,996 tensors (one node's tensors up to 4 times) and
// stopped as a recompute storm; without the storm's stop the iteration took 3.0-3.7x its
// compute. So before the inputs are brought back one by one, the dropped tensors they
// need (through dropped inputs: the set the recursion would recompute) are recomputed in
// the order they were first made (by id: an output's id is above its inputs'), and each
// tensor the set reads, recomputed or already resident (parameters aside), is held by a
// waiting pin until the last tensor of the set that reads it has been recomputed: the
// policy evicts other tensors first, and such a pin yields only as a last resort (Note
// [Regeneration order]). Then the recursion finds the inputs resident. A released tensor
// is dropped again once nothing of the set needs it, as recompute drops the inputs it
// regenerated. Measured on replays of nine models (docs/dte.md, "Planned regeneration"):
// holding the set's own tensors alone left the storm (resident inputs went between their
// readers, and the recursion set off again from them); holding a resident input only from
// its first reader in the set made the Tree-LSTM 2.393x and ResNet-56 at 20% 1.473x
// (1.757x and 1.420x as here); planning only once an op met a recompute cycle left the
// Tree-LSTM a storm. The recursion alone (EvictOptions::plan_regeneration false) kept
// ResNet-56 at 15-20% in drop mode up to 1% lower.
absl::Status Engine::regenerate_in_order(std::span<TensorRecord* const> ins) {
  auto dropped = [](const TensorRecord* r) { return r->state == StorageState::kDropped; };
  if (!opts_.plan_regeneration || std::none_of(ins.begin(), ins.end(), dropped)) return absl::OkStatus();
  absl::flat_hash_map<TensorRecord*, uint32_t> readers;  // set members not yet recomputed that read it
  std::vector<TensorRecord*> set, work;
  for (TensorRecord* r : ins) {
    if (r->state == StorageState::kDropped && readers.emplace(r, 0).second) work.push_back(r);
  }
  while (!work.empty()) {
    TensorRecord* t = work.back();
    work.pop_back();
    set.push_back(t);
    for (uint64_t id : t->producer->inputs) {
      TensorRecord* in = find(id);
      if (in == nullptr) continue;
      auto [it, fresh] = readers.emplace(in, 0);
      ++it->second;
      if (fresh && in->state == StorageState::kDropped) work.push_back(in);
    }
  }
  if (set.size() < 2) return absl::OkStatus();  // one recompute: nothing to order
  std::sort(set.begin(), set.end(), [](const TensorRecord* a, const TensorRecord* b) { return a->id < b->id; });
  const absl::flat_hash_set<const TensorRecord*> target(ins.begin(), ins.end());  // pinned by make_resident
  absl::flat_hash_set<TensorRecord*> held;
  auto unpin = [&](TensorRecord& r) {
    if (--r.pin_count == 0 && r.state == StorageState::kResident) pinned_.sub(r.block.size);
    unwait(r);
  };
  absl::Cleanup release = [&] {
    for (TensorRecord* r : held) unpin(*r);
  };
  auto hold = [&](TensorRecord& r) {
    if (r.pin_count++ == 0) pinned_.add(r.block.size);
    ++waiting_pins_[&r];
    held.insert(&r);
  };
  // The resident tensors the set reads (parameters aside), held until their last reader
  // in it has run.
  for (auto& [r, n] : readers) {
    if (r->state == StorageState::kResident && !r->persistent && !target.contains(r)) hold(*r);
  }
  for (TensorRecord* t : set) {
    MTC_RETURN_IF_ERROR(ensure_resident(*t));
    if (readers[t] > 0 && !target.contains(t)) hold(*t);
    for (uint64_t id : t->producer->inputs) {
      TensorRecord* in = find(id);
      auto it = in == nullptr ? readers.end() : readers.find(in);
      if (it == readers.end() || --it->second > 0 || !held.erase(in)) continue;
      unpin(*in);
      drop_again(*in, /*own_pins=*/0);
    }
  }
  return absl::OkStatus();
}

// Note [Regeneration order]
// An op's inputs are marked as just used (so the policy evicts them last) and all pinned
// before anything is regenerated, the resident ones too (as DTR's simulator locks them
// all first): regenerating one input must not evict another that the op needs as much.
// Then the missing ones are regenerated one by one. These first pins are waiting pins:
// when nothing else can be evicted, evict_one may evict such an input, and a second pass,
// once every input has been regenerated, pins them firmly and brings back any evicted
// meanwhile. Each input is regenerated at most twice, so the work stays linear in the
// recompute chain (retrying until all fit at once would not). Without the yield, a
// recompute chain through a residual network's skip connections held one regenerated
// operand per block (every add's first input while the second recursed into the block
// before), and a larger budget, whose different earlier evictions led into a longer
// chain, ran out of memory where a smaller one had not (replayed ResNet-56 traces, drop
// mode; docs/dte.md). Such a pin yields only where the request would otherwise fail, so a
// run that fits is unchanged. Until 2026-11-27 the inputs already resident were not
// pinned in the first pass: replayed in drop mode, pinning them lowered ResNet-56 at 20%
// of its peak from 1.475 to 1.452 (region limit: 1.550 to 1.487), turned ResNet-56 at 15%
// from a recompute storm into 2.040, lowered a 12-layer GPT at 15% from 3.204 to 3.117,
// and changed no other cell of that sweep (docs/dte.md, "At the low end").
absl::Status Engine::make_resident(std::span<TensorRecord* const> ins, Pins& pins) {
  for (TensorRecord* r : ins) r->last_access = op_clock_;
  absl::InlinedVector<bool, 4> waiting(ins.size(), false);
  absl::Cleanup stop_waiting = [&] {
    for (size_t i = 0; i < ins.size(); ++i) {
      if (waiting[i]) unwait(*ins[i]);
    }
  };
  for (size_t i = 0; i < ins.size(); ++i) {
    pins.add(ins[i]);
    ++waiting_pins_[ins[i]];
    waiting[i] = true;
  }
  MTC_RETURN_IF_ERROR(regenerate_in_order(ins));
  for (TensorRecord* r : ins) MTC_RETURN_IF_ERROR(ensure_resident(*r));
  for (size_t i = 0; i < ins.size(); ++i) {
    unwait(*ins[i]);
    waiting[i] = false;
    MTC_RETURN_IF_ERROR(ensure_resident(*ins[i]));
  }
  return absl::OkStatus();
}

void Engine::drop_again(TensorRecord& r, uint32_t own_pins) {
  if (!r.handle_alive && r.pin_count == own_pins && r.state == StorageState::kResident && droppable(r) &&
      !feeds_dropped(r)) {
    drop(r);
  }
}

void Engine::unwait(const TensorRecord& r) {
  auto it = waiting_pins_.find(&r);
  if (--it->second == 0) waiting_pins_.erase(it);
}

absl::Status Engine::check_overhead(const TensorRecord& r) const {
  const double spent = stats_.recompute_us + stats_.swap_us;
  if (opts_.max_overhead_us <= 0 || spent <= opts_.max_overhead_us) return absl::OkStatus();
  return absl::AbortedError(absl::StrFormat(
      "the overhead cap: recomputing and swapping have taken %.0f us, past the cap of %.0f us, before %s %s "
      "could be regenerated",
      spent, opts_.max_overhead_us, r.desc.str(), r.producer ? absl::StrCat("(op ", host_.op_name(*r.producer), ")") : ""));
}

// Note [Recompute cycles]
// One op's inputs can need the same dropped tensor again and again: regenerating its
// third input evicts what its first input's recompute path had regenerated, the second
// pass brings the first back, and so on down the chain. A Tree-LSTM's concat of 64 node
// states, replayed in drop mode at 30% of its peak, recomputed single tensors more than
// 1,300 times for that one op, and the replay ran past 4x its compute time. So a tensor
// recomputed a second time while one op's inputs are made resident (a cycle) is kept for
// the rest of that op: the search may still swap it but no longer drops it, and drops it
// only as a last resort, when nothing else (except inputs waiting for their op) can go.
// A tensor recomputed max_recomputes_per_op times for one op even so stops the op with an
// error naming it and the tensor: no order of the op's regeneration fits the budget
// without a storm, and a larger budget is what helps.
absl::Status Engine::recompute(TensorRecord& r) {
  MTC_CHECK(r.producer != nullptr, "dropped tensor without a compute path");
  MTC_RETURN_IF_ERROR(check_overhead(r));
  if (opts_.max_recomputes_per_op > 0 && r.recomputed_for == op_clock_ &&
      r.recomputes_for_op >= opts_.max_recomputes_per_op) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a recompute storm: ", r.desc.str(), " (op ", host_.op_name(*r.producer), ") was recomputed ",
        r.recomputes_for_op, " times to make this op's inputs resident, and is needed again: the budget cannot "
        "hold this op's regeneration; expected a larger --budget"));
  }
  const std::shared_ptr<ComputePath> path = r.producer;  // keep it alive across erasures
  absl::InlinedVector<TensorRecord*, 4> ins;
  for (size_t i = 0; i < path->inputs.size(); ++i) {
    TensorRecord* in = find(path->inputs[i]);
    if (in == nullptr || in->version != path->input_versions[i]) {
      return absl::InternalError(
          absl::StrCat("op ", host_.op_name(*path), ": cannot recompute: input ", i, " changed"));
    }
    ins.push_back(in);
  }
  // The executor runs the op again (its inputs regenerated first, by make_resident) into
  // blocks of the compute region: dropped output records get their storage back; the
  // others (resident, swapped, or gone) were written to temporary blocks, freed here.
  Pins pins(pinned_);
  Rerun out;
  MTC_RETURN_IF_ERROR(host_.rerun(path, ins, pins, out));
  ++stats_.recomputes;
  stats_.recompute_us += out.us;
  for (size_t i = 0; i < out.targets.size(); ++i) {
    TensorRecord* t = out.targets[i];
    if (t == nullptr) {
      host_.free_compute(out.blocks[i]);
      continue;
    }
    set_resident(*t, out.blocks[i]);
    t->last_access = op_clock_;
    ++t->recompute_count;
    if (t->recomputed_for != op_clock_) {
      t->recomputed_for = op_clock_;
      t->recomputes_for_op = 1;
    } else if (++t->recomputes_for_op == 2) {  // a cycle: kept for the rest of this op
      ++kept_now_;
      ++stats_.recompute_cycles;
    }
    classes_.restore(t->id);
  }
  // Inputs the user has released were regenerated only for this: drop them again.
  for (uint64_t id : path->inputs) drop_again(*find(id), /*own_pins=*/1);
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
absl::Status Engine::snapshot_before_mutation(TensorRecord& x) {
  // Only when something may still be regenerated from x's current value.
  if (x.users.empty() || !feeds(x, /*count_evictable=*/true, /*otherwise=*/true)) return absl::OkStatus();
  MTC_ASSIGN_OR_RETURN(alloc::Block b, host_.claim(x.desc.bytes(), [&] {
    return absl::StrCat("snapshot of ", x.desc.str(), " before an in-place update");
  }, Claim::kSnapshot));
  if (!simulate_) MTC_RETURN_IF_ERROR(host_.copy_on_device(host_.compute_ptr(b), host_.data(x), x.desc.bytes()));
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

// Note [Gradients are not recomputed]
// Tensors made by the backward pass are never dropped, only swapped. Regenerating a
// gradient means rerunning the backward from the loss down to it, a chain no local cost
// estimate bounds, and the backward's live set is small: the bulk of memory is the
// forward activations it reads, which stay recomputable. Such tensors therefore need no
// recompute sources and are not recorded as users of their inputs, so a gradient
// released after use is freed at once.
void Engine::add_users(std::span<TensorRecord* const> ins, std::span<const uint64_t> outputs, bool recomputable) {
  if (recomputable) {
    for (TensorRecord* r : ins) r->users.insert(r->users.end(), outputs.begin(), outputs.end());
  }
}

void Engine::release(TensorRecord& r) {
  r.handle_alive = false;
  if (r.users.empty()) {
    erase_record(r.id);
  } else if (r.state == StorageState::kResident && droppable(r) && !feeds_dropped(r)) {
    // Still a recompute source for tensors computed from it ("fake delete"): keep the
    // record, free the storage. Note [Fake delete]
    drop(r);
  }
}

void Engine::erase_record(uint64_t id) {
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

void Engine::cut_producer(TensorRecord& r) {
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

}  // namespace evict
}  // namespace mtc
