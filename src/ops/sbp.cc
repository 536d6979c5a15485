// The shared builders of DTP's per-op tables. See sbp.h.
#include "ops/sbp.h"

namespace mtc {

namespace sbp {

bool can_split(const Shape& s, int d, int parts) { return partition::splittable(s, d, parts < 2 ? 2 : parts); }

Signature sig(std::initializer_list<Placement> in, std::initializer_list<Placement> out, Mode m) {
  Signature s;
  s.in.assign(in.begin(), in.end());
  s.out.assign(out.begin(), out.end());
  s.mode = m;
  return s;
}

Signature all_r(size_t n_in, size_t n_out) { return uniform(n_in, Placement::R(), n_out, Placement::R()); }

Signature uniform(size_t n_in, Placement p_in, size_t n_out, Placement p_out, Mode m) {
  Signature s;
  s.in.assign(n_in, p_in);
  s.out.assign(n_out, p_out);
  s.mode = m;
  return s;
}

int64_t local_dim(int64_t n, const ShardContext& g) { return partition::shard_range(n, g.parts, g.index).size; }

}  // namespace sbp
}  // namespace mtc
