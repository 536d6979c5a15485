// The eviction scores of mtc's policy and the baselines; see cost.h.
#include "evict/cost.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace mtc {

absl::StatusOr<EvictPolicy> parse_evict_policy(const std::string& n) {
  if (n == "mtc") return EvictPolicy::kMtc;
  if (n == "dtr") return EvictPolicy::kDtr;
  if (n == "lru") return EvictPolicy::kLru;
  if (n == "largest") return EvictPolicy::kLargest;
  if (n == "capuchin") return EvictPolicy::kCapuchin;
  if (n == "none") return EvictPolicy::kNone;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown eviction policy '", n, "': expected one of mtc, dtr, lru, largest, capuchin, none"));
}

absl::StatusOr<EvictMode> parse_evict_mode(const std::string& n) {
  if (n == "both") return EvictMode::kBoth;
  if (n == "drop") return EvictMode::kDrop;
  if (n == "swap") return EvictMode::kSwap;
  return absl::InvalidArgumentError(absl::StrCat("unknown eviction mode '", n, "': expected both, drop or swap"));
}

const char* evict_policy_name(EvictPolicy p) {
  switch (p) {
    case EvictPolicy::kMtc: return "mtc";
    case EvictPolicy::kDtr: return "dtr";
    case EvictPolicy::kLru: return "lru";
    case EvictPolicy::kLargest: return "largest";
    case EvictPolicy::kCapuchin: return "capuchin";
    case EvictPolicy::kNone: return "none";
  }
  return "?";
}

const char* evict_mode_name(EvictMode m) {
  return m == EvictMode::kBoth ? "both" : m == EvictMode::kDrop ? "drop" : "swap";
}

namespace evict {

Score EvictionCost::score(const CandidateStats& c) const {
  const bool drop_ok = c.can_drop && mode_ != EvictMode::kSwap;
  const bool swap_ok = c.can_swap && mode_ != EvictMode::kDrop;
  Score s;
  if (policy_ == EvictPolicy::kNone || (!drop_ok && !swap_ok)) return s;
  s.eligible = true;
  const double m = static_cast<double>(c.bytes);
  const double stale = std::max(c.staleness, 1.0);
  const double c_r = c.compute_us + c.neighbourhood_us;
  // The action the baselines take when both are allowed; mtc's picks the cheaper.
  auto prefer = [&](Action a) { return a == Action::kDrop ? (drop_ok ? Action::kDrop : Action::kSwap)
                                                           : (swap_ok ? Action::kSwap : Action::kDrop); };
  switch (policy_) {
    case EvictPolicy::kMtc: {
      double cost;
      if (drop_ok && swap_ok) {
        s.action = c.swap_us < c_r ? Action::kSwap : Action::kDrop;
        cost = std::min(c.swap_us, c_r);
      } else {
        s.action = drop_ok ? Action::kDrop : Action::kSwap;
        cost = drop_ok ? c_r : c.swap_us;
      }
      const double room = m + (free_room_ ? static_cast<double>(c.free_left + c.free_right) : 0.0);
      const double factor = std::pow(beta_, std::min(c.recompute_count, beta_max_power_));
      s.h = std::max(cost, 1e-3) * factor / (room * stale);
      break;
    }
    case EvictPolicy::kDtr:
      s.action = prefer(Action::kDrop);
      s.h = std::max(s.action == Action::kDrop ? c_r : c.swap_us, 1e-3) / (m * stale);
      break;
    case EvictPolicy::kLru:
      s.action = prefer(Action::kDrop);
      s.h = 1.0 / stale;
      break;
    case EvictPolicy::kLargest:
      s.action = prefer(Action::kDrop);
      s.h = 1.0 / m;
      break;
    case EvictPolicy::kCapuchin:
      s.action = prefer(Action::kSwap);
      s.h = 1.0 / (m * stale);
      break;
    case EvictPolicy::kNone:
      break;
  }
  return s;
}

}  // namespace evict
}  // namespace mtc
