// embedding: rows of a weight table gathered by i32 indices, and the gradient op that
// scatter-adds dy back into a (V, D) table in a fixed order (no races, bit-identical
// run to run). An index outside [0, V) fails the kernel with InvalidArgument.
#pragma once

#include "op_def.h"

namespace mtc {

// EmbeddingOp: weight f32 (V, D), indices i32 (...) -> (..., D).
struct EmbeddingOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  MTC_OP_SCHEMA("embedding")
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0b10; }  // indices only
};

// EmbeddingGradOp: indices i32 (...), dy f32 (..., D) -> dweight (V, D), where row v
// sums the rows of dy whose index is v, in the order they appear.
struct EmbeddingGradOp final : OpDef {
  MTC_OP_SCHEMA("embedding_grad")
  explicit EmbeddingGradOp(int64_t vocab) : vocab(vocab) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  std::string attrs() const override;
  int64_t vocab;  // V
};

}  // namespace mtc
