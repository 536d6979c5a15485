// EvictionCost: the score that picks which resident tensor DTE evicts, and how.
//
// MegTaiChi's cost (policy mtc), for a candidate t:
//   h(t) = min(C_r, C_s) * beta^ret / ((m + M_left + M_right) * s)
// C_r: t's compute time plus its evicted neighbourhood's (the union-find classes of
// evicted tensors next to t, as DTR's e*); C_s = m / gamma, the time to swap t out and
// back, with gamma the round-trip bandwidth (the engine passes 2 m / the one-way copy
// bandwidth: a swap is two copies, and on the CPU both block); ret: how often t was
// recomputed; m: t's bytes; M_left, M_right: free bytes touching t's block, so
// evictions that merge into large free blocks are preferred (the engine passes them
// only when the request failed for want of a large enough block, else 0);
// s: staleness (ops since t was last used). The smallest h is evicted, by swap when
// C_s < C_r, else by drop. Baselines: dtr (C_r / (m * s), always drop), lru (stalest),
// largest, capuchin (swap-first by staleness and size), none (never evict).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mtc/evict_options.h"

namespace mtc::evict {

// CandidateStats: what the cost sees of one resident tensor. Times in microseconds.
struct CandidateStats {
  size_t bytes = 0;
  double compute_us = 0;        // c(t): its op's measured time
  double neighbourhood_us = 0;  // compute time of the evicted tensors next to it
  double swap_us = 0;           // C_s = bytes / gamma, gamma the round-trip bandwidth
  uint32_t recompute_count = 0;
  double staleness = 1;         // ops since its last use, at least 1
  size_t free_left = 0, free_right = 0;
  bool can_drop = false;  // it has a compute path whose inputs are still at their version
  bool can_swap = false;
};

enum class Action : uint8_t { kDrop, kSwap };

struct Score {
  double h = 0;  // smaller evicts first
  Action action = Action::kDrop;
  bool eligible = false;  // false: the policy and mode allow no eviction of it
};

class EvictionCost {
 public:
  explicit EvictionCost(const EvictOptions& o)
      : policy_(o.policy), mode_(o.mode), beta_(o.beta), beta_max_power_(o.beta_max_power), free_room_(o.free_room) {}
  Score score(const CandidateStats& c) const;
  EvictPolicy policy() const { return policy_; }

 private:
  EvictPolicy policy_;
  EvictMode mode_;
  double beta_;
  uint32_t beta_max_power_;
  bool free_room_;
};

}  // namespace mtc::evict
