// Elementwise ops: fill, the broadcasting binary ops (add, sub, mul), scale, and the
// activations (relu, swish, gelu) with their gradient ops; expand, broadcasting's
// inverse partner of sum_to.
#pragma once

#include "op_def.h"

namespace mtc {

// broadcast_shape: NumPy broadcasting of a and b, or InvalidArgument naming both.
absl::StatusOr<Shape> broadcast_shape(const Shape& a, const Shape& b);

// FillOp: no inputs; a tensor of `shape` filled with `value`.
struct FillOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  MTC_OP_SCHEMA("fill")
  FillOp(Shape s, float v, DType t = DType::kF32) : shape(std::move(s)), value(v), dtype(t) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  std::string attrs() const override;
  Shape shape;
  float value;
  DType dtype;
};

enum class BinaryKind : uint8_t { kAdd, kSub, kMul };

// BinaryOp: out = a (op) b with broadcasting. f32 only.
struct BinaryOp final : OpDef {
  explicit BinaryOp(BinaryKind k) : kind(k) {}
  const OpSchema& schema() const override;
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return kind == BinaryKind::kMul ? 0b11 : 0; }
  static OpSchema& add_schema();
  static OpSchema& sub_schema();
  static OpSchema& mul_schema();
  BinaryKind kind;
};

// ScaleOp: out = x * s.
struct ScaleOp final : OpDef {
  MTC_OP_SCHEMA("scale")
  explicit ScaleOp(float s) : s(s) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  float s;
};

enum class ActKind : uint8_t { kRelu, kSwish, kGelu };

// ActOp: an activation. relu saves its output; swish and gelu save only their input.
struct ActOp final : OpDef {
  explicit ActOp(ActKind k) : kind(k) {}
  const OpSchema& schema() const override;
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return kind == ActKind::kRelu ? 0 : 1; }
  uint64_t saves_outputs() const override { return kind == ActKind::kRelu ? 1 : 0; }
  static OpSchema& relu_schema();
  static OpSchema& swish_schema();
  static OpSchema& gelu_schema();
  double flops_per_element() const override { return kind == ActKind::kRelu ? 1 : kind == ActKind::kSwish ? 4 : 8; }
  ActKind kind;
};

// ActGradOp: dx from (saved, dy); saved is relu's output, or swish's / gelu's input.
struct ActGradOp final : OpDef {
  explicit ActGradOp(ActKind k) : kind(k) {}
  const OpSchema& schema() const override;
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  static OpSchema& relu_grad_schema();
  static OpSchema& swish_grad_schema();
  static OpSchema& gelu_grad_schema();
  double flops_per_element() const override { return kind == ActKind::kRelu ? 1 : kind == ActKind::kSwish ? 7 : 12; }
  ActKind kind;
};

// ExpandOp: broadcasts x to `shape` (a copy).
struct ExpandOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  MTC_OP_SCHEMA("expand")
  explicit ExpandOp(Shape s) : shape(std::move(s)) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  Shape shape;
};

Tensor expand(const Tensor& x, const Shape& shape);

}  // namespace mtc
