// DTP's per-op tables: the builders the tables share. Each op's table sits next
// to its definition (src/ops/*.cc, src/optim/step_ops.cc); the contract of a signature
// is partition/placement.h's: for inputs held with placements s.in, the op run on each
// rank's local inputs (or shard_op's op, where attributes name global sizes) gives that
// rank's part of every global output under s.out.
#pragma once

#include <initializer_list>
#include <span>

#include "dist/dtp.h"
#include "op_def.h"
#include "partition/placement.h"

namespace mtc {

namespace sbp {
using partition::Mode;
using partition::Placement;
using partition::Signature;
using partition::SignatureList;

// can_split: dim d of s may be split over `parts` ranks (parts == 0: any group size,
// so at least 2 elements).
bool can_split(const Shape& s, int d, int parts);
// sig: a signature from its placements.
Signature sig(std::initializer_list<Placement> in, std::initializer_list<Placement> out, Mode m = Mode::kNone);
// all_r: every one of n_in inputs and n_out outputs Replicated.
Signature all_r(size_t n_in, size_t n_out);
// uniform: every input with placement p_in, every output p_out.
Signature uniform(size_t n_in, Placement p_in, size_t n_out, Placement p_out, Mode m = Mode::kNone);
// local_dim: the size of rank g.index's shard of a dim of n elements.
int64_t local_dim(int64_t n, const ShardContext& g);

}  // namespace sbp
}  // namespace mtc
