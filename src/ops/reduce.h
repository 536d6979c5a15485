// Reductions: sum over a set of dims, scaled (mean is sum * 1/count). The output's memory
// layout is the input's with the reduced dims removed, whatever shape it is given, so
// sum(dims, keepdim), mean and sum_to (broadcasting's inverse) are all this one op.
#pragma once

#include "op_def.h"
#include "ops/sbp.h"

namespace mtc {

// DTP: R -> R; S(d), d kept -> S(d's dim in the output) (shard_op: the local output
// shape); S(d), d reduced -> P (a mean's scale is already 1 / the global count); P -> P.
struct ReduceSumOp final : OpDef {
  MTC_OP_SCHEMA("sum")
  // reduce: one flag per input dim; out_shape: the output's shape (its numel must be
  // the product of the kept dims); scale: multiplies the sum.
  ReduceSumOp(std::vector<bool> reduce, Shape out_shape, float scale)
      : reduce(std::move(reduce)), out_shape(std::move(out_shape)), scale(scale) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  std::shared_ptr<const OpDef> shard_op(const partition::Signature& s, std::span<const TensorDesc> in,
                                        const ShardContext& g) const override;
  // out_dim: the output dim that holds kept input dim d (of more than one element), or -1
  // where the output shape merges it with others.
  int out_dim(const Shape& x, int d) const;
  // Runs: x's dims with size-1 dims dropped and neighbours of the same kind (reduced or
  // kept) merged, outermost first: what the kernels loop over.
  struct Runs {
    std::vector<int64_t> sizes;
    std::vector<bool> reduced;
  };
  Runs runs(const Shape& x) const;
  std::vector<bool> reduce;
  Shape out_shape;
  float scale;
};

}  // namespace mtc
