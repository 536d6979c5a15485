// Engine: DTE's eviction engine. It keeps the tensor records and DTE's graph over them
// (compute paths, users, fake deletes, copy-on-mutate snapshots), the eviction
// candidates, and carries evictions out: it chooses a victim by evict::EvictionCost and
// swaps it to a host buffer or drops it; before an op runs it regenerates the evicted
// inputs (swap in, or recompute along the compute path, recursively). It also measures
// gamma, the host <-> device copy bandwidth the cost reads.
//
// The executor owns one and calls it at the steps of an op (docs/design.md): step 2,
// make_resident (pin and regenerate the inputs); step 3, evict_one while an allocation
// does not fit; step 5, add_users and cut_producer; and release on a Del. The engine
// reaches memory and the kernels only through Host, which the executor implements: the
// regions, copies between host and device, allocation (with eviction and TMA), and a
// recompute's op run. So the engine has no kernel and no device, and the same code
// drives the runtime and the trace-replay simulator (mtc-replay).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "alloc/region.h"
#include "evict/cost.h"
#include "evict/evicted_classes.h"
#include "evict/record.h"
#include "mtc/evict_options.h"
#include "mtc/interpreter.h"

namespace mtc::evict {

// Claim: what the engine allocates a compute-region block for.
enum class Claim : uint8_t {
  kSwapIn,    // a swapped tensor coming back (TMA keys it as a swap-in)
  kSnapshot,  // a copy of a tensor before an in-place update (Note [Copy on mutate])
};

// Rerun: a recompute's op run, as Host::rerun hands it back: for each of the path's
// outputs, the block it was written to and the dropped record that block goes back to
// (null: a temporary, freed afterwards), and the op's time.
struct Rerun {
  absl::InlinedVector<TensorRecord*, 2> targets;
  absl::InlinedVector<alloc::Block, 2> blocks;
  double us = 0;
};

// Host: what the engine asks of the executor that owns it.
class Host {
 public:
  virtual ~Host() = default;
  virtual alloc::Region& compute_region() = 0;
  virtual alloc::Region& comm_region() = 0;
  virtual std::byte* compute_ptr(alloc::Block b) = 0;
  virtual std::byte* data(const TensorRecord& r) = 0;  // r's bytes, in whichever region
  // claim: a compute-region block through the executor's allocate, which evicts (by
  // Engine::evict_one) until it fits, or returns the out-of-memory error naming `who`.
  virtual absl::StatusOr<alloc::Block> claim(size_t bytes, const std::function<std::string()>& who,
                                             Claim why) = 0;
  // free_compute: returns a block to the compute region (and tells TMA).
  virtual void free_compute(alloc::Block b) = 0;
  // Copies between host memory and the device; never called when simulating.
  virtual absl::Status copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status copy_on_device(void* dst, const void* src, size_t bytes) = 0;
  // Swapped tensors' host memory and copies: the device's alloc_host, free_host,
  // swap_out, swap_in, copies_async and synchronize (src/device.h); the copies are never
  // called when simulating.
  virtual std::byte* alloc_host(size_t bytes) = 0;
  virtual void free_host(std::byte* p) = 0;
  virtual absl::Status swap_out(void* host, const void* src, size_t bytes) = 0;
  virtual absl::Status swap_in(void* dst, const void* host, size_t bytes) = 0;
  virtual bool copies_async() const = 0;
  virtual absl::Status synchronize() = 0;
  // move_compute: live compute-region block b moves to `offset` (the region's and TMA's
  // books, and the bytes unless simulating: the ranges may overlap). Note [Compaction]
  virtual absl::StatusOr<alloc::Block> move_compute(alloc::Block b, size_t offset) = 0;
  // rerun: runs path's op again for a recompute, as an op of its own nested in the one
  // being run: makes `ins` resident by Engine::make_resident under `pins`, allocates each
  // output (a dropped output record, found when its turn comes, is a target) and runs the
  // kernel. On an error nothing it allocated is left held.
  virtual absl::Status rerun(const std::shared_ptr<ComputePath>& path, std::span<TensorRecord* const> ins,
                             Pins& pins, Rerun& out) = 0;
  virtual const char* op_name(const ComputePath& path) = 0;  // for messages
};

struct EngineOptions {
  EvictOptions evict;
  bool simulate = false;     // replay: no byte moves; a swap costs bytes / gamma
  double bytes_per_us = 0;   // gamma to use instead of measuring it (0: measure)
  bool trace = false;        // a trace records gamma, so it is measured even without eviction
};

// HeldBytes: the resident tensors of the compute region by why they stay, for the
// out-of-memory message.
struct HeldBytes {
  size_t own_inputs = 0;    // pinned as inputs of the op being run
  size_t waiting = 0;       // pinned by the ops waiting on it
  size_t persistent = 0;    // parameters, optimizer state, gradients kept in m2
  size_t small = 0;         // under the size floor: never candidates
  size_t kept_by_mode = 0;  // not recomputable, which mode drop cannot evict
  size_t evictable = 0;
  size_t total() const { return own_inputs + waiting + persistent + small + kept_by_mode + evictable; }
};

// TensorBytes: the tensors of the compute region by kind, for the memory timeline
// (mtc-train --chrome_trace, mtc-memplot): the persistent ones resident there (parameters,
// optimizer state, gradients kept in m2), and the bytes of the evicted ones a handle still
// names, swapped to host or dropped to be recomputed: what would be resident without DTE
// (an evicted tensor kept only as a recompute source, Note [Fake delete], is not counted:
// without DTE it would be gone).
struct TensorBytes {
  size_t persistent = 0;
  size_t swapped = 0;
  size_t dropped = 0;
  bool operator==(const TensorBytes&) const = default;
};

class Engine {
 public:
  // The constructor measures gamma through host when it must (see bytes_per_us).
  Engine(Host& host, const EngineOptions& o);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  // release_all: frees every record's storage; the owner calls it before it goes.
  void release_all();
  // set_score: from now on candidates are scored by o's policy, beta, beta_max_power and
  // free_room (the runtime's tuning, Note [Tuning the score] in src/trace/replay.cc).
  void set_score(const EvictOptions& o);

  // ---- the records ----
  const absl::node_hash_map<uint64_t, TensorRecord>& records() const { return records_; }
  TensorRecord* find(uint64_t id) {
    auto it = records_.find(id);
    return it == records_.end() ? nullptr : &it->second;
  }
  TensorRecord& add(uint64_t id);  // a new record (or the one named id)
  // set_resident: r now lives at b in the compute region, and is a candidate if it may be.
  void set_resident(TensorRecord& r, alloc::Block b);
  void remove_candidate(TensorRecord& r);
  // clock: ApplyOps executed so far, the staleness clock; tick: one more.
  uint64_t clock() const { return op_clock_; }
  void tick() {
    ++op_clock_;
    kept_now_ = 0;
  }

  // ---- step 2: the inputs ----
  // make_resident: marks ins as just used, pins them into `pins` and brings back each one
  // evicted. Note [Regeneration order]
  absl::Status make_resident(std::span<TensorRecord* const> ins, Pins& pins);
  absl::Status ensure_resident(TensorRecord& r);  // swap in or recompute r if evicted

  // ---- step 3: eviction ----
  // evict_one: evicts the lowest-scoring unpinned candidate (swap or drop; a waiting pin
  // yields when nothing else can go, Note [Regeneration order]) and says whether it found
  // one. fragmented: the request was within the budget but found no free block large
  // enough, so free neighbours count.
  bool evict_one(bool fragmented);
  // compact: when the compute region's free bytes would hold `bytes` but no free block
  // does, moves resident tensors so that one does, copying as few bytes as it can (in_use:
  // the inputs of a kernel running now, which holds their addresses: they stay put). Says
  // whether it made such a block. Note [Compaction]
  bool compact(size_t bytes, std::span<TensorRecord* const> in_use);
  // compact_if_cheaper: compact, when EvictOptions::move_when_cheaper and four times the
  // copy would cost less time than the cheapest run of adjacent evictions that frees such
  // a block (Note [Compaction]).
  bool compact_if_cheaper(size_t bytes, std::span<TensorRecord* const> in_use);
  // pack_low: at an iteration boundary (no op running), slides every resident tensor of
  // the compute region, persistent ones too, down over the free bytes below it, in
  // address order, so that the live blocks sit together at the low end; blocks that are
  // no tensor's stay where they are. Counted as a compaction. Note [Packing at the
  // boundary] in alloc/tma.cc
  void pack_low();
  HeldBytes held(std::span<TensorRecord* const> own_inputs) const;
  // tensor_bytes: TensorBytes over every record (a walk of them all).
  TensorBytes tensor_bytes() const;

  // ---- step 4 and 5: mutation and the graph ----
  absl::Status snapshot_before_mutation(TensorRecord& x);  // Note [Copy on mutate]
  // add_users: outputs are computed from ins; recomputable: they may be dropped.
  // Note [Gradients are not recomputed]
  void add_users(std::span<TensorRecord* const> ins, std::span<const uint64_t> outputs, bool recomputable);
  // cut_producer: r stops being recomputable (it became a gradient, or was mutated in
  // place); its sources lose it as a user and are erased if nothing else needs them.
  void cut_producer(TensorRecord& r);
  // release: the user's last handle to r is gone. Note [Fake delete]
  void release(TensorRecord& r);

  // stats: DTE's totals; the executor adds its own op runs and their times.
  EvictStats& stats() { return stats_; }
  double bytes_per_us() const { return bytes_per_us_; }  // gamma
  // pinned: the resident bytes pinned now and at most (every Pins is made with it).
  PinnedBytes& pinned() { return pinned_; }
  const PinnedBytes& pinned() const { return pinned_; }

 private:
  // movable_by_offset: resident tensors of the compute region by offset, the ones compaction
  // and pack_low may move (pinned ones only with move_pinned; never one whose bytes work in
  // flight still uses, OpDef::holds_inputs).
  absl::flat_hash_map<size_t, TensorRecord*> movable_by_offset(bool move_pinned);
  // move_to: r's bytes to `offset` in the compute region, its copied bytes added to
  // `copied`; false when the device failed the copy (r stays where it was).
  bool move_to(TensorRecord& r, size_t offset, size_t& copied);
  // count_moves: one compaction's moved bytes and time, started at t0, in the stats.
  void count_moves(size_t copied, std::chrono::steady_clock::time_point t0);
  absl::Status recompute(TensorRecord& r);
  // regenerate_in_order: recomputes the dropped tensors `ins` needs in the order they were
  // made, each pinned (waiting) until the last of them that reads it. Note [Planned regeneration]
  absl::Status regenerate_in_order(std::span<TensorRecord* const> ins);
  absl::Status check_overhead(const TensorRecord& r) const;  // EvictOptions::max_overhead_us
  // consider: no_drop: r may only be swapped (Note [Recompute cycles]).
  void consider(TensorRecord* r, bool fragmented, bool no_drop, TensorRecord*& best, Score& best_score,
                CandidateStats* out = nullptr);
  // score_of: r's score as evict_one would see it over the budget; its inputs in *stats.
  Score score_of(TensorRecord& r, CandidateStats* stats);
  // CompactionPlan: the moves (tensor, new offset, in order) that make a large enough free
  // block, and the bytes they copy (SIZE_MAX: no plan). Note [Compaction]
  struct CompactionPlan {
    size_t moved = SIZE_MAX;
    std::vector<std::pair<TensorRecord*, size_t>> moves;
  };
  // Slot: a stretch of the compute region in address order: a free gap, or a live block
  // and the tensor of `owner` that holds it (nullptr: none of them).
  struct Slot {
    size_t offset, size;
    bool gap;
    TensorRecord* r;
  };
  // layout: the slots of the region whose live blocks, by offset, are `live`.
  std::vector<Slot> layout(std::span<const alloc::Block> live,
                           const absl::flat_hash_map<size_t, TensorRecord*>& owner) const;
  CompactionPlan plan_compaction(size_t bytes, std::span<TensorRecord* const> in_use,
                                 std::span<const alloc::Block> live);
  bool run_compaction(const CompactionPlan& plan, size_t bytes);
  // eviction_window_us: what evicting the cheapest run of adjacent tensors that, with the
  // free bytes among them, makes a block of `bytes` would cost: the sum of each one's
  // recompute or swap time; kNoWindow when no such run exists.
  static constexpr double kNoWindow = 1e300;
  double eviction_window_us(size_t bytes, std::span<const alloc::Block> live);
  // kept_for_this_op: r was recomputed twice or more for the op being run, so it is kept
  // from being dropped but as a last resort (Note [Recompute cycles]).
  bool kept_for_this_op(const TensorRecord& r) const {
    return r.recomputed_for == op_clock_ && r.recomputes_for_op >= 2;
  }
  // waiting_pins: how many of r's pins are waiting pins (Note [Regeneration order]).
  uint32_t waiting_pins(const TensorRecord& r) const;
  void unwait(const TensorRecord& r);
  bool droppable(const TensorRecord& r) const;
  // drop_again: drops r, regenerated only as a recompute source, once its user has released
  // it, nothing but the caller's `own_pins` pin it and no dropped tensor it feeds is held
  // (Note [Fake delete]).
  void drop_again(TensorRecord& r, uint32_t own_pins);
  void drop(TensorRecord& r);
  bool feeds_dropped(const TensorRecord& r) const;  // Note [Fake delete]
  bool feeds(const TensorRecord& r, bool count_evictable, bool otherwise) const;
  void rebuild_classes();
  absl::Status swap_out(TensorRecord& r);
  void release_storage(TensorRecord& r);
  void add_candidate(TensorRecord& r);
  void erase_record(uint64_t id);  // and, in cascade, inputs nothing needs any more
  void measure_bandwidth();
  void note_swap_copy(size_t bytes, double us);
  HostBytes take_host_buffer(size_t bytes);
  void give_host_buffer(size_t bytes, HostBytes b);

  Host& host_;
  EvictOptions opts_;
  bool simulate_;
  EvictionCost cost_;
  EvictedClasses classes_;
  absl::node_hash_map<uint64_t, TensorRecord> records_;
  std::vector<TensorRecord*> candidates_;  // resident, evictable, not below the size floor
  // Regenerated inputs waiting for their op's other inputs, with how many of their pins
  // are such waiting pins (Note [Regeneration order] in engine.cc).
  absl::flat_hash_map<const TensorRecord*, uint32_t> waiting_pins_;
  std::mt19937_64 sample_rng_{0x5eed};
  double bytes_per_us_ = 0;  // gamma: host <-> device copy bandwidth (see note_swap_copy)
  bool refine_gamma_ = false;  // gamma was measured at start-up, so swaps may refine it
  double copied_bytes_ = 0, copied_us_ = 0;  // real swap copies so far, both directions
  uint64_t op_clock_ = 0;    // ApplyOps executed so far: the staleness clock
  size_t kept_now_ = 0;      // tensors kept for the current op (Note [Recompute cycles])
  static constexpr uint64_t kSnapshotIdBase = uint64_t{1} << 62;  // above any handle's id
  uint64_t next_snapshot_ = 0;
  EvictStats stats_;
  PinnedBytes pinned_;
  std::multimap<size_t, HostBytes> host_pool_;  // Note in take_host_buffer
  size_t host_pool_bytes_ = 0;
  size_t swapped_now_ = 0, swapped_high_ = 0;  // bytes swapped out at present, at most
};

}  // namespace mtc::evict
