// EvictOptions: how DTE (dynamic tensor evicting) keeps the compute region under a budget:
// which policy chooses the tensor to evict, whether it may be swapped to host memory or
// dropped and recomputed, and the thresholds of the search.
#pragma once

#include <cstddef>
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
  double beta = 2.0;                 // MegTaiChi's beta: penalises tensors recomputed often
  size_t min_candidate_bytes = 16384;  // smaller tensors are never evicted
  size_t sample_above = 400;         // above this many candidates, search a sqrt(n) sample
};

absl::StatusOr<EvictPolicy> parse_evict_policy(const std::string& name);  // "mtc", "dtr", ...
absl::StatusOr<EvictMode> parse_evict_mode(const std::string& name);      // "both", "drop", "swap"
const char* evict_policy_name(EvictPolicy p);
const char* evict_mode_name(EvictMode m);

}  // namespace mtc
