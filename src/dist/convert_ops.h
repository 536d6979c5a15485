// DTP's placement conversions as ops of the registry: a global tensor held over the ranks
// of a group as Replicated, Split(dim) or Partial (partition/placement.h) is turned into
// another placement, on any dimension and with uneven shards (shard_range: the first
// n % p ranks hold one element more; a dimension smaller than p leaves empty shards).
//
//   from -> to       step (ConvertOp)              backward
//   S(d) -> R        all_gather on d               reduce_scatter (sum) on d: P -> S(d)
//   S(d) -> S(d')    all_to_all                    the inverse all_to_all: S(d') -> S(d)
//   P -> R           all_reduce (sum)              all_reduce (sum): P -> R
//   P -> S(d)        reduce_scatter (sum) on d     all_gather on d: S(d) -> R
//   R -> S(d)        the local slice (SliceOp)     zero-pad back to the whole (slice_backward)
//
// The backward rules hold under the convention of include/mtc/distributed.h: the quantity
// differentiated is the sum of the ranks' losses, and each rank's shard (each rank's copy,
// for R and P) is a variable of its own.
//
// Uneven shards on the wire: all_gather and reduce_scatter pad every rank's block to the
// largest shard (outer * ceil(n / p) * inner elements), so they run on the communicator's
// native, ring-optimal all_gather and reduce_scatter; the padding is at most one slab of
// the dimension (outer * inner elements) per rank. all_to_all sends exact blocks with
// all_to_all_v (no padding). Kernels: src/kernels/cpu/convert.cc, src/kernels/cuda/convert.cc.
#pragma once

#include <memory>
#include <string>

#include "dist/collective_ops.h"
#include "partition/placement.h"

namespace mtc::dist {

// convert: x is this rank's local shard of a global tensor `global` held with placement
// `from` over c's ranks; returns this rank's local shard of the same global tensor held
// with placement `to`. Differentiable; issues one op (or none when from == to).
// Collective: every rank calls it, with the same global, from and to. R -> P and
// S(d) -> P are not conversions (an InvalidArgument error on the returned tensor).
Tensor convert(const Tensor& x, const TensorDesc& global, partition::Placement from, partition::Placement to,
               const CommPtr& c);

// ConvertOp: one collective conversion (all_gather, all_to_all, all_reduce or
// reduce_scatter; the slice is SliceOp). Input: this rank's shard of `global` under
// `from`; output: its shard under `to`. attrs: "all_gather d=1 f32[5,7,3] world=4".
struct ConvertOp final : CollectiveOp {
  MTC_OP_SCHEMA("convert")
  ConvertOp(CommPtr c, TensorDesc g, partition::Placement f, partition::Placement t);
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;

  TensorDesc global;
  partition::Placement from, to;
  partition::Conversion step;  // plan_conversion(from, to)
};

// ConvertLayout: a dimension d of a row-major shape viewed as (outer, n, inner); shard r
// of it is the strided 2-D block of `outer` rows of len_r * inner elements at column
// off_r * inner, row pitch n * inner.
struct ConvertLayout {
  int64_t outer = 1, n = 1, inner = 1;
};
ConvertLayout layout_along(const Shape& s, int d);

// break_convert_backward: TESTING ONLY. The step named by the environment variable
// MTC_TESTING_BREAK_CONVERT_BACKWARD (read once; "all_gather", "all_to_all", "all_reduce"
// or "reduce_scatter") gets a wrong backward: its gradient is not reduced/exchanged across
// the ranks, only this rank's part is kept (all_gather: the local slice instead of the
// reduce_scatter; reduce_scatter: the gradient zero-padded instead of gathered;
// all_reduce: the gradient as it is; all_to_all: the local slice of the gradient's
// shard, zero-padded). Lets an equivalence test show that it catches a wrong rule. Never
// set it outside tests.
partition::Step break_convert_backward();

}  // namespace mtc::dist
