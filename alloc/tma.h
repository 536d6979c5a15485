// Tma: planned, fragment-free offsets for the compute region's transient requests.
//
// Each iteration (between two boundaries) the runtime reports every compute-region
// request and free to Tma. A request is transient when it is freed before the iteration
// ends; its lifetime is [alloc event, free event) on the iteration's own clock (one tick
// per request or free). The iteration's signature hashes its sequence of (op key, size)
// over the program's own requests (see the op keys below).
//
//  - Tracing: during the first `warmup_iterations` iterations only records are kept.
//  - Planning: at the end of an iteration past the warm-up, a signature seen at least
//    twice (so a one-off shape is never planned) and not yet planned is planned from
//    that iteration's trace with alloc::plan() and cached. The static model's one
//    signature is planned at the end of the warm-up. Past max_plans plans, the plan
//    whose signature ended an iteration longest ago is evicted; its sightings stay, so it
//    is planned again the next time it ends one.
//  - Applying: in every later iteration a request is offered the planned offset (plan
//    base + offset) of the active plan's request with the same op key and size and the
//    same occurrence of that key in the iteration (in a static iteration, the k-th
//    request's own; a recompute or swap-in that DTE inserts shifts no other request).
//    The runtime takes it if that range is free and within the budget (a hit), else it
//    falls back to best-fit in whatever is free at that moment (a miss). When the
//    requests leave the active plan's sequence, Tma switches to a cached plan whose
//    sequence has the same prefix, if one exists.
//  - The plan's base is chosen at each iteration's start: the lowest free block that
//    holds the plan's whole peak, clear of every block still live (parameters, optimizer
//    state and whatever crosses iterations). When no free block is that large, the plan
//    starts at the largest one, and its requests planned past that block's end fall back
//    to best-fit (counted in plan_failures). The budget m* holds because the plan was
//    traced under it and every request still passes the budget check.
// Tma never allocates: it proposes offsets, and the region keeps the truth, so a wrong
// proposal costs a miss, never an overlap. No kernels, no CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "alloc/plan.h"
#include "alloc/region.h"

namespace mtc::alloc {

// Op keys. The runtime keys each request by the op it is made for: program_op_key(id) for
// the program's own ops (the two low bits clear), recompute_key() of that for a recompute,
// kSwapInKey for a swap-in. Regeneration requests (recomputes, swap-ins) are traced and
// planned like any other, but are left out of the iteration's signature and of the
// sequence Tma matches plans by, so that DTE's run-to-run choices do not split one shape
// of iteration into many.
inline uint64_t program_op_key(uint64_t id) { return id << 2; }
inline uint64_t recompute_key(uint64_t program_key) { return program_key | 1; }
inline constexpr uint64_t kSwapInKey = 2;
inline bool is_regeneration(uint64_t op_key) { return (op_key & 3) != 0; }

struct TmaOptions {
  int warmup_iterations = 5;     // iterations traced before the first plan
  double plan_time_limit_sec = 1.0;
  // max_plans: plans kept; a new plan past it evicts the one whose signature was seen
  // longest ago (its sightings are kept, so it is planned again on its next one).
  size_t max_plans = 32;
  // problem_path: each plan's problem and offsets as a MiniMalloc CSV (TmaConfig's).
  std::string problem_path;
};

struct TmaStats {
  uint64_t iterations = 0;         // iterations ended
  uint64_t planned_iterations = 0; // iterations that began with a plan to apply
  uint64_t hits = 0;               // requests placed at their planned offset
  uint64_t misses = 0;             // other requests in planned iterations (best-fit)
  uint64_t plans = 0;              // plans made (cached signatures)
  uint64_t plan_failures = 0;      // iterations whose plan fitted no free block whole
  uint64_t cache_hits = 0;         // iterations past the warm-up whose signature had a plan
  uint64_t cache_lookups = 0;      // iterations past the warm-up
  double plan_sec = 0;             // time in the planner
  double max_plan_sec = 0;         // the longest one plan took
  uint64_t problem_write_failures = 0;  // plans whose problem_path file could not be written
  size_t last_plan_peak = 0, last_plan_lower_bound = 0;
  uint64_t plans_evicted = 0;      // plans dropped for max_plans (least recently seen first)
  size_t plans_cached = 0;         // plans held now
  size_t cache_bytes = 0;          // host memory the plans hold now (their offset tables)
  double hit_rate() const {
    return hits + misses == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(hits + misses);
  }
  double cache_hit_rate() const {
    return cache_lookups == 0 ? 0.0 : static_cast<double>(cache_hits) / static_cast<double>(cache_lookups);
  }
};

class Tma {
 public:
  explicit Tma(TmaOptions options);

  // boundary: the current iteration ends (if one began) and the next begins. `region`
  // gives the live blocks the next plan must sit above.
  //
  // pack: when set and a plan is about to be applied whose room (the lowest free block
  // that holds it) starts more than 1% of its peak above the bytes allocated, pack() is
  // called first, to move the live blocks below it together (Note [Packing at the
  // boundary] in alloc/tma.cc), and the room is chosen after it.
  void boundary(const Region& region, const std::function<void()>& pack = {});
  // propose: the offset (in the region) the next request should take, if the active plan
  // has one for a request of this op key and size. Call once per request, then placed().
  std::optional<size_t> propose(uint64_t op_key, size_t size);
  // placed: the request just proposed (or, without a proposal, just made) got block b;
  // hit says whether it is the proposed offset.
  void placed(uint64_t op_key, Block b, bool hit);
  // freed: block b of the region was freed.
  void freed(Block b);
  // moved: live block `from` now lives at `to` (compaction); its request keeps its
  // lifetime, and its planned offset is not learnt from the move.
  void moved(Block from, Block to);

  const TmaStats& stats() const { return stats_; }

 private:
  struct Request {
    uint64_t key = 0;   // op key mixed with the size
    size_t size = 0;
    int64_t start = 0;  // iteration clock at the request
    int64_t end = -1;   // at its free; -1 while live
    bool program = true;  // made for the program's own op, not to regenerate a tensor
  };
  struct Plan {
    std::vector<uint64_t> prefix;    // hash of the keys of program requests 0..k
    // per key, the planned offset of its n-th request in the iteration (-1: not planned,
    // it outlived the iteration)
    absl::flat_hash_map<uint64_t, std::vector<int64_t>> by_key;
    size_t peak = 0;
  };
  void end_iteration();
  void make_plan(uint64_t signature, const std::vector<Request>& trace);
  void choose_base(const Region& region);
  const Plan* next_plan() const;  // the plan choose_base() applies: the last signature's, else the newest

  TmaOptions opts_;
  TmaStats stats_;
  bool in_iteration_ = false;
  int64_t clock_ = 0;
  std::vector<Request> requests_;                  // this iteration's, in order
  absl::flat_hash_map<size_t, size_t> live_;       // offset -> index into requests_
  uint64_t prefix_ = 0;                            // hash of this iteration's program keys so far
  size_t program_requests_ = 0;                    // this iteration's program requests so far
  bool diverged_ = false;                          // no plan has this iteration's prefix
  absl::flat_hash_map<uint64_t, uint32_t> seen_;   // requests of each key so far
  // per signature: how often seen, its plan once made
  struct Entry {
    int seen = 0;
    uint64_t last_seen = 0;  // the iteration (stats_.iterations) that last ended with it
    std::shared_ptr<Plan> plan;
  };
  void evict_plans(uint64_t keep);  // down to max_plans, least recently seen first
  static size_t plan_bytes(const Plan& p);
  absl::flat_hash_map<uint64_t, Entry> cache_;
  std::vector<std::shared_ptr<Plan>> plans_;       // every plan made, most recent last
  const Plan* active_ = nullptr;                   // the plan applied this iteration
  bool iteration_planned_ = false;                 // this iteration began with a plan
  size_t base_ = 0;                                // where the planned area starts
  size_t base_limit_ = 0;                          // a plan switched to must end below it
  uint64_t last_signature_ = 0;                    // of the iteration that ended last
};

}  // namespace mtc::alloc
