// matmul (batched, broadcasting, with transpose flags so its gradients are matmuls too)
// and linear with a fused bias, plus linear's weight-gradient op. Row-major throughout.
#pragma once

#include "op_def.h"

namespace mtc {

// MatmulOp: y = op(a) op(b), op transposing the last two dims where flagged. a is
// (..., M, K) (or (..., K, M) with trans_a), b (..., K, N) (or (..., N, K)); the batch
// dims broadcast, and y is (batch..., M, N).
struct MatmulOp final : OpDef {
  MTC_OP_SCHEMA("matmul")
  MatmulOp(bool trans_a = false, bool trans_b = false) : trans_a(trans_a), trans_b(trans_b) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  std::string attrs() const override;
  // Plan: what the kernels read off the shapes of a, b and y: `batches` products of
  // (m, k) x (k, n), the batch dims of each, and `fold`: one b serves every batch of an
  // untransposed a, so the batch folds into a's rows and a single GEMM does.
  struct Plan {
    int64_t m, n, k, batches;
    Shape a_batch, b_batch, y_batch;
    bool fold;
  };
  Plan plan(const Shape& a, const Shape& b, const Shape& y) const;
  bool trans_a, trans_b;
};

// LinearOp: x (..., IN), w (OUT, IN), bias (OUT) if has_bias -> (..., OUT) = x w^T + bias.
struct LinearOp final : OpDef {
  MTC_OP_SCHEMA("linear")
  explicit LinearOp(bool has_bias) : has_bias(has_bias) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0b011; }  // x, w
  std::string attrs() const override { return has_bias ? "bias" : ""; }
  bool has_bias;
};

// LinearBackwardWeightOp: from x (..., IN) and dy (..., OUT): dw (OUT, IN) = dy^T x over
// every leading index and, with_bias, db (OUT) = the sum of dy's rows.
struct LinearBackwardWeightOp final : OpDef {
  MTC_OP_SCHEMA("linear_backward_weight")
  explicit LinearBackwardWeightOp(bool with_bias) : with_bias(with_bias) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  bool differentiable() const override { return false; }
  int num_outputs() const override { return with_bias ? 2 : 1; }
  std::string attrs() const override { return with_bias ? "bias" : ""; }
  bool with_bias;
};

}  // namespace mtc
