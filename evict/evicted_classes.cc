// Union-find over dropped tensors with per-class cost sums; see evicted_classes.h.
#include "evict/evicted_classes.h"

#include <utility>

namespace mtc::evict {

void EvictedClasses::add(uint64_t t, double compute_us) {
  auto [it, fresh] = nodes_.try_emplace(t, Node{t, compute_us, compute_us});
  if (fresh) {
    ++active_;
    return;
  }
  // Dropped again after a restore: it rejoins its old class with its new cost.
  Node& n = it->second;
  if (n.active) return;
  ++active_;
  n.active = true;
  n.own_us = compute_us;
  nodes_[root(t)].class_us += compute_us;
}

uint64_t EvictedClasses::root(uint64_t t) {
  uint64_t r = t;
  while (nodes_[r].parent != r) r = nodes_[r].parent;
  while (nodes_[t].parent != r) t = std::exchange(nodes_[t].parent, r);  // path compression
  return r;
}

void EvictedClasses::unite(uint64_t t, uint64_t u) {
  uint64_t a = root(t), b = root(u);
  if (a == b) return;
  Node *na = &nodes_[a], *nb = &nodes_[b];
  if (na->rank < nb->rank) {
    std::swap(a, b);
    std::swap(na, nb);
  }
  nb->parent = a;
  na->class_us += nb->class_us;
  if (na->rank == nb->rank) ++na->rank;
}

void EvictedClasses::restore(uint64_t t) {
  auto it = nodes_.find(t);
  if (it == nodes_.end() || !it->second.active) return;
  it->second.active = false;
  --active_;
  nodes_[root(t)].class_us -= it->second.own_us;
}

double EvictedClasses::class_cost(uint64_t t) {
  auto it = nodes_.find(t);
  if (it == nodes_.end()) return 0;
  const double c = nodes_[root(t)].class_us;
  return c > 0 ? c : 0;
}

}  // namespace mtc::evict
