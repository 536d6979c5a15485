// conv2d as three ops: the forward (with an optional fused bias) and its two gradient
// ops, so that backward runs through the interpreter like any other op. Layouts are
// PyTorch's: x (N, C, H, W), w (OC, C/groups, KH, KW), bias (OC), y (N, OC, OH, OW).
#pragma once

#include "mtc/ops.h"
#include "op_def.h"
#include "ops/sbp.h"

namespace mtc {

// conv_out_size: PyTorch's output size along one dim (floor mode), or <= 0 when the
// (dilated) kernel does not fit in the padded input.
inline int64_t conv_out_size(int64_t in, int64_t kernel, int stride, int pad, int dilation) {
  const int64_t span = static_cast<int64_t>(dilation) * (kernel - 1) + 1;
  const int64_t room = in + 2 * static_cast<int64_t>(pad) - span;
  return room < 0 ? 0 : room / stride + 1;
}

// Conv2dOp: y = conv(x, w) + bias. Inputs x, w[, bias]. bias_ignored: the bias input is
// taken but not added and gets no gradient (DTP's P3 on the ranks but the first).
//
// DTP (x (N, C, H, W), w (OC, C/groups, KH, KW), bias (OC)):
//   R, R, R -> R
//   S(0), R, R -> S(0)                                   [p1]  (p2: w gathered first)
//   S(1), S(1), R -> P      groups 1; bias on rank 0     [p3]
//   R, S(0), S(0) -> S(1)   groups 1                     [p4]
//   S(1), S(0), S(0) -> S(1)  depthwise (groups = C = OC); shard_op: groups = local C
//   S(2) or S(3) are not listed (windows cross the shards).
struct Conv2dOp final : OpDef {
  MTC_OP_SCHEMA("conv2d")
  Conv2dOp(Conv2dOptions o, bool has_bias, bool bias_ignored = false)
      : o(o), has_bias(has_bias), bias_ignored(bias_ignored) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0b011; }  // x, w; never the bias
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  std::shared_ptr<const OpDef> shard_op(const partition::Signature& s, std::span<const TensorDesc> in,
                                        const ShardContext& g) const override;
  bool adds_bias() const { return has_bias && !bias_ignored; }
  Conv2dOptions o;
  bool has_bias;
  bool bias_ignored;
};

// Conv2dBackwardInputOp: dx (x_shape) from dy (N, OC, OH, OW) and w.
struct Conv2dBackwardInputOp final : OpDef {
  MTC_OP_SCHEMA("conv2d_backward_input")
  Conv2dBackwardInputOp(Conv2dOptions o, Shape x_shape) : o(o), x_shape(std::move(x_shape)) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  bool differentiable() const override { return false; }
  std::string attrs() const override;
  Conv2dOptions o;
  Shape x_shape;
};

// Conv2dBackwardWeightOp: dw (w_shape) and, with_bias, db (OC) from x and dy.
struct Conv2dBackwardWeightOp final : OpDef {
  MTC_OP_SCHEMA("conv2d_backward_weight")
  Conv2dBackwardWeightOp(Conv2dOptions o, Shape w_shape, bool with_bias)
      : o(o), w_shape(std::move(w_shape)), with_bias(with_bias) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  bool differentiable() const override { return false; }
  int num_outputs() const override { return with_bias ? 2 : 1; }
  std::string attrs() const override;
  Conv2dOptions o;
  Shape w_shape;
  bool with_bias;
};

}  // namespace mtc
