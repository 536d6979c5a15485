// matmul (batched, broadcasting, with transpose flags so its gradients are matmuls too)
// and linear with a fused bias, plus linear's weight-gradient op. Row-major throughout.
#pragma once

#include "op_def.h"
#include "ops/sbp.h"

namespace mtc {

// MatmulOp: y = op(a) op(b), op transposing the last two dims where flagged. a is
// (..., M, K) (or (..., K, M) with trans_a), b (..., K, N) (or (..., N, K)); the batch
// dims broadcast, and y is (batch..., M, N).
//
// DTP (a (..., M, K), b (..., K, N), the dims read through the transposes):
//   R, R -> R
//   S(batch), S(batch) or R (where b broadcasts it) -> S(batch)   [p1 when b is 2-D]
//   S(M), R -> S(M)                                               [p1 when b is 2-D]
//   R, S(N) -> S(N)                                               [p4 when b is 2-D]
//   S(K), S(K) -> P                                               [p3 when b is 2-D]
//   P, R -> P;  R, P -> P
// Modes label only a product with a 2-D b (a weight); an activation-by-activation product
// (attention) has none, so a forced mode leaves it free.
struct MatmulOp final : OpDef {
  MTC_OP_SCHEMA("matmul")
  MatmulOp(bool trans_a = false, bool trans_b = false) : trans_a(trans_a), trans_b(trans_b) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
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
// bias_ignored: the bias input is taken but not added, and gets no gradient (DTP's P3 on
// the ranks but the first, so that the partial sums hold the bias once).
//
// DTP:
//   R, R, R -> R
//   S(d), R, R -> S(d)      d a leading dim          [p1]  (p2: the same, W gathered first)
//   S(last), S(1), R -> P   bias on rank 0 only      [p3]
//   R, S(0), S(0) -> S(last)                         [p4]
//   P, R, R -> P            bias on rank 0 only
struct LinearOp final : OpDef {
  MTC_OP_SCHEMA("linear")
  explicit LinearOp(bool has_bias, bool bias_ignored = false) : has_bias(has_bias), bias_ignored(bias_ignored) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0b011; }  // x, w
  std::string attrs() const override { return has_bias ? (bias_ignored ? "bias=ignored" : "bias") : ""; }
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  std::shared_ptr<const OpDef> shard_op(const partition::Signature& s, std::span<const TensorDesc> in,
                                        const ShardContext& g) const override;
  bool has_bias;
  bool bias_ignored;
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
