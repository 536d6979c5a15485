// EvictedClasses: DTR's equivalence classes of evicted tensors, as a union-find over
// tensor ids. Dropped tensors that touch in the compute graph join one class whose cost
// is the sum of its members' compute times: recomputing any member may have to
// recompute its neighbours, so that sum is its evicted neighbourhood's cost. Like DTR, a
// class is never split when a member comes back; the member's cost is only subtracted.
// Restored members still join their class, so the owner rebuilds the structure from the
// dropped tensors (clear, add, unite) once restored nodes outnumber dropped ones; else
// classes chained through long-gone tensors grow to span the whole program.
#pragma once

#include <cstdint>

#include "absl/container/flat_hash_map.h"

namespace mtc::evict {

class EvictedClasses {
 public:
  // add: t was dropped; its recompute costs compute_us.
  void add(uint64_t t, double compute_us);
  // unite: t and u are both dropped and neighbours in the graph.
  void unite(uint64_t t, uint64_t u);
  // restore: t is resident again; its cost leaves its class.
  void restore(uint64_t t);
  // erase: t's record is gone for good.
  void erase(uint64_t t) { restore(t); }
  bool contains(uint64_t t) const { return nodes_.contains(t) && nodes_.at(t).active; }
  // root / class_cost: the class of a dropped t and the summed compute time of its live
  // members (microseconds).
  uint64_t root(uint64_t t);
  double class_cost(uint64_t t);
  size_t size() const { return nodes_.size(); }     // nodes, restored ones included
  size_t active() const { return active_; }         // dropped members
  void clear() {
    nodes_.clear();
    active_ = 0;
  }

 private:
  struct Node {
    uint64_t parent;
    double own_us;
    double class_us;  // valid at roots
    uint32_t rank = 0;
    bool active = true;
  };
  absl::flat_hash_map<uint64_t, Node> nodes_;
  size_t active_ = 0;
};

}  // namespace mtc::evict
