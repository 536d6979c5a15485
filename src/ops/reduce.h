// Reductions: sum over a set of dims, scaled (mean is sum * 1/count). The output's memory
// layout is the input's with the reduced dims removed, whatever shape it is given, so
// sum(dims, keepdim), mean and sum_to (broadcasting's inverse) are all this one op.
#pragma once

#include "op_def.h"

namespace mtc {

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
