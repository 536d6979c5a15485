// DTP's per-op tables: the base of the ops whose placement signatures depend on the size
// of the partition group, and the builders the tables share. Each op's table sits next
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

// SbpOp: an op with its own table. sbp() lists its signatures for a group of `parts`
// ranks: some depend on it (a dim smaller than parts gets no split; a reshape keeps a
// split only where every rank's shard maps onto the matching standard shard).
// parts == 0 means "any group size": only the signatures exact for every p, with splits
// on dims of at least 2 elements. OpDef::signatures, which has no group size, gives that.
struct SbpOp : OpDef {
  virtual void sbp(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const = 0;
  void signatures(std::span<const TensorDesc> in, partition::SignatureList& out) const final { sbp(in, 0, out); }
};

// op_signatures: op's signatures for a group of `parts` ranks: SbpOp::sbp where the op
// has a table of its own, else OpDef::signatures (all R).
void op_signatures(const OpDef& op, std::span<const TensorDesc> in, int parts, partition::SignatureList& out);

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
