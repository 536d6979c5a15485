// EvictOptions: how DTE (dynamic tensor evicting) keeps the compute region under a budget:
// which policy chooses the tensor to evict, whether it may be swapped to host memory or
// dropped and recomputed, and the thresholds of the search.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace mtc {

// EvictPolicy: mtc is MegTaiChi's cost (see evict/cost.h); the others are baselines.
enum class EvictPolicy : uint8_t { kMtc, kDtr, kLru, kLargest, kCapuchin, kNone };
// EvictMode: which evictions are allowed.
enum class EvictMode : uint8_t { kBoth, kDrop, kSwap };

struct EvictOptions {
  EvictPolicy policy = EvictPolicy::kMtc;
  EvictMode mode = EvictMode::kBoth;
  // budget_bytes: m*, the threshold on the compute region's allocated bytes; 0 means the
  // region's capacity (evict only when an allocation does not fit).
  size_t budget_bytes = 0;
  // MegTaiChi's beta^ret: a tensor recomputed ret times scores beta^ret higher, so it is
  // evicted later. ret counts at most beta_max_power recomputes, so the factor stays finite
  // (2^1024 overflowed) and a tensor recomputed over and over is not shielded without end.
  // Chosen by replaying ResNet, ViT and GPT traces in drop mode (docs/dte.md): beta 2,
  // unbounded, made a GPT at 20% of its peak 2.04x against 1.43x. No fixed setting was at
  // or below DTR's score on every trace, so the runtime tunes (`tune` below).
  double beta = 1.25;
  uint32_t beta_max_power = 4;
  // free_room: policy mtc counts the free bytes on either side of a candidate when a
  // request failed for want of a large enough block (an eviction that merges free blocks
  // is worth more); false weighs each candidate by its own bytes alone, as DTR does.
  bool free_room = true;
  // move_when_cheaper: a request within the budget that finds no free block large enough
  // moves resident tensors together (compaction) when four times the copy costs less time
  // than the cheapest run of adjacent evictions that would free such a block; false: it
  // evicts, and tensors move only once nothing more can be evicted. Note [Compaction] in
  // evict/engine.cc.
  bool move_when_cheaper = true;
  // plan_regeneration: the dropped tensors an op's inputs need are recomputed in the order
  // they were first made, each held until the last of them that reads it; false: each
  // input is regenerated down its own chain, as it is asked for. Note [Planned
  // regeneration] in evict/engine.cc.
  bool plan_regeneration = true;
  // tune: policy mtc, once the first two iterations are done (at the third "iteration"
  // mark), the runtime replays them under each of score_candidates() (src/trace/replay.h)
  // and keeps the last of them unless an earlier one replayed less overhead by more than
  // 2% (keep_candidate), and never one that ran out of memory. Not when `reproducible` (the replay reads measured
  // times) nor on an asynchronous device (whose op times the record lacks). Note [Tuning
  // the score] in src/trace/replay.cc.
  bool tune = true;
  size_t min_candidate_bytes = 16384;  // smaller tensors are never evicted
  size_t sample_above = 400;         // above this many candidates, search a sqrt(n) sample
  // reproducible: score with each op's FLOPs estimate (at 1 GFLOP/s) and a fixed 10 GB/s
  // swap bandwidth instead of measured times, so the same program makes the same evictions
  // on every run and machine (tests; comparing policies).
  bool reproducible = false;
  // max_overhead_us: once the time spent recomputing and swapping passes this, the next
  // regeneration stops the op with an Aborted error (0: never). mtc-replay's cap
  // (--max_overhead), so that a recompute storm ends in seconds.
  double max_overhead_us = 0;
  // max_recomputes_per_op: a tensor recomputed this many times while one op's inputs are
  // made resident stops that op with a ResourceExhausted error naming it (a recompute
  // storm: the budget is too small for the op's regeneration; 0: never). Note [Recompute
  // cycles] in evict/engine.cc says how the value was chosen.
  uint32_t max_recomputes_per_op = 16;
};

absl::StatusOr<EvictPolicy> parse_evict_policy(const std::string& name);  // "mtc", "dtr", ...
absl::StatusOr<EvictMode> parse_evict_mode(const std::string& name);      // "both", "drop", "swap"
const char* evict_policy_name(EvictPolicy p);
const char* evict_mode_name(EvictMode m);

}  // namespace mtc
