// Pooling ops on NCHW: max_pool2d and avg_pool2d (each with its gradient op) and
// global_avg_pool. Output sizes use floor mode, as PyTorch's default.
#pragma once

#include "mtc/ops.h"
#include "op_def.h"
#include "ops/sbp.h"

namespace mtc {

// DTP of the pools: R -> R; S(0) -> S(0); S(1) -> S(1) (each image and channel on its own;
// windows cross H and W, so those are not split); the averages also P -> P (linear).

// MaxPool2dOp: x (N, C, H, W) -> (N, C, OH, OW); padding reads as -infinity.
struct MaxPool2dOp final : OpDef {
  MTC_OP_SCHEMA("max_pool2d")
  explicit MaxPool2dOp(Pool2dOptions o) : o(o) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 1; }  // x: the backward finds the argmax again
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  Pool2dOptions o;
};

// MaxPool2dBackwardOp: dx from x and dy. Each window's gradient goes to its first maximum
// (row-major order), the element PyTorch picks.
struct MaxPool2dBackwardOp final : OpDef {
  MTC_OP_SCHEMA("max_pool2d_backward")
  explicit MaxPool2dBackwardOp(Pool2dOptions o) : o(o) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  std::string attrs() const override;
  Pool2dOptions o;
};

// AvgPool2dOp: x (N, C, H, W) -> (N, C, OH, OW); padding counts toward the divisor
// (count_include_pad=True), so every window divides by KH * KW.
struct AvgPool2dOp final : OpDef {
  MTC_OP_SCHEMA("avg_pool2d")
  explicit AvgPool2dOp(Pool2dOptions o) : o(o) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  Pool2dOptions o;
};

// AvgPool2dBackwardOp: dx (x_shape) from dy.
struct AvgPool2dBackwardOp final : OpDef {
  MTC_OP_SCHEMA("avg_pool2d_backward")
  AvgPool2dBackwardOp(Pool2dOptions o, Shape x_shape) : o(o), x_shape(std::move(x_shape)) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  std::string attrs() const override;
  Pool2dOptions o;
  Shape x_shape;
};

// GlobalAvgPoolOp: x (N, C, H, W) -> (N, C), the mean over H and W.
struct GlobalAvgPoolOp final : OpDef {
  MTC_OP_SCHEMA("global_avg_pool")
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
};

}  // namespace mtc
