// Softmax-family ops: softmax and log_softmax along one dim (numerically stable: the
// line's max is subtracted first), their gradient op, and cross_entropy, one fused op of
// log_softmax and the mean negative log-likelihood, with its gradient op; and topk, the
// indices of each row's largest values (accuracy).
#pragma once

#include "op_def.h"
#include "ops/sbp.h"

namespace mtc {

// SoftmaxOp: softmax (or log_softmax) of x along `dim`. Backward needs only the output.
// DTP: R -> R; S(d), d != dim -> S(d).
struct SoftmaxOp final : OpDef {
  SoftmaxOp(int dim, bool log) : dim(dim), log(log) {}
  const OpSchema& schema() const override;
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  uint64_t saves_outputs() const override { return 1; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  static OpSchema& softmax_schema();
  static OpSchema& log_softmax_schema();
  int dim;
  bool log;
};

// SoftmaxGradOp: dx from (y, dy), y the forward's output.
//   softmax:     dx = y * (dy - sum(dy * y))
//   log_softmax: dx = dy - exp(y) * sum(dy)          (sums along dim)
struct SoftmaxGradOp final : OpDef {
  SoftmaxGradOp(int dim, bool log) : dim(dim), log(log) {}
  const OpSchema& schema() const override;
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  std::string attrs() const override;
  static OpSchema& softmax_grad_schema();
  static OpSchema& log_softmax_grad_schema();
  int dim;
  bool log;
};

// CrossEntropyOp: logits f32 (N, C), labels i32 (N) -> mean over rows of
// logsumexp(logits[n]) - logits[n, labels[n]], shape []. A label outside [0, C) fails
// the kernel with InvalidArgument. divisor: what the sum over rows is divided by; 0
// (the default) means N, the rows given; DTP's split batch divides by the global N.
//
// DTP: R, R -> R; logits S(0), labels S(0) -> P (shard_op: divisor = the global N).
struct CrossEntropyOp final : OpDef {
  MTC_OP_SCHEMA("cross_entropy")
  explicit CrossEntropyOp(double divisor = 0) : divisor(divisor) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  // cost: the default counts one flop for the one output; the work is per logit.
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0b11; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  std::shared_ptr<const OpDef> shard_op(const partition::Signature& s, std::span<const TensorDesc> in,
                                        const ShardContext& g) const override;
  double divisor;
};

// CrossEntropyGradOp: (logits, labels, dy []) -> dlogits = (softmax(logits) - onehot) * dy / N
// (/ divisor when it is not 0, as the forward's).
struct CrossEntropyGradOp final : OpDef {
  MTC_OP_SCHEMA("cross_entropy_grad")
  explicit CrossEntropyGradOp(double divisor = 0) : divisor(divisor) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  std::string attrs() const override;
  double divisor;
};

// cross_entropy_divisor: what a cross_entropy op of `divisor` divides the sum over n rows by.
inline double cross_entropy_divisor(double divisor, int64_t n) { return divisor > 0 ? divisor : static_cast<double>(n); }

// check_cross_entropy_inputs: InvalidArgument unless logits is f32 (N, C) with C >= 1
// and labels is i32 (N).
absl::Status check_cross_entropy_inputs(const TensorDesc& logits, const TensorDesc& labels);

// TopkOp: x f32 (..., C) -> i32 (..., k): each row's k largest values' indices, the
// largest first; of equal values the lower index first; NaN counts as below every number.
// k in [1, C]. No gradient.
struct TopkOp final : OpDef {
  MTC_OP_SCHEMA("topk")
  explicit TopkOp(int k) : k(k) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  std::string attrs() const override;
  int k;
};

}  // namespace mtc
