// Elementwise ops: fill, the broadcasting binary ops (add, sub, mul), scale, and the
// activations (relu, swish, gelu, sigmoid, tanh) with their gradient ops; expand, broadcasting's
// inverse partner of sum_to.
#pragma once

#include "op_def.h"
#include "ops/sbp.h"

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
// DTP (partition::elementwise_signatures): R, R -> R; S(d) on every input holding output
// dim d unbroadcast, R on those broadcasting it -> S(d); add, sub: P, P -> P; mul:
// P, R -> P and R, P -> P.
struct BinaryOp final : OpDef {
  explicit BinaryOp(BinaryKind k) : kind(k) {}
  const OpSchema& schema() const override;
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return kind == BinaryKind::kMul ? 0b11 : 0; }
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  static OpSchema& add_schema();
  static OpSchema& sub_schema();
  static OpSchema& mul_schema();
  BinaryKind kind;
};

// ScaleOp: out = x * s. DTP: R -> R, S(d) -> S(d), P -> P.
struct ScaleOp final : OpDef {
  MTC_OP_SCHEMA("scale")
  explicit ScaleOp(float s) : s(s) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  float s;
};

enum class ActKind : uint8_t { kRelu, kSwish, kGelu, kSigmoid, kTanh };

// saves_output: the activations whose gradient is a function of their output (relu:
// y > 0; sigmoid: y (1 - y); tanh: 1 - y^2); swish and gelu save their input instead.
constexpr bool saves_output(ActKind k) { return k == ActKind::kRelu || k == ActKind::kSigmoid || k == ActKind::kTanh; }

// ActOp: an activation. relu, sigmoid and tanh save their output; swish and gelu only their input.
// DTP: R -> R, S(d) -> S(d) (not linear: no P).
struct ActOp final : OpDef {
  explicit ActOp(ActKind k) : kind(k) {}
  const OpSchema& schema() const override;
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return saves_output(kind) ? 0 : 1; }
  uint64_t saves_outputs() const override { return saves_output(kind) ? 1 : 0; }
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  static OpSchema& relu_schema();
  static OpSchema& swish_schema();
  static OpSchema& gelu_schema();
  static OpSchema& sigmoid_schema();
  static OpSchema& tanh_schema();
  double flops_per_element() const override {
    return kind == ActKind::kRelu ? 1 : kind == ActKind::kGelu ? 8 : 4;  // swish, sigmoid, tanh: an exp and a divide
  }
  ActKind kind;
};

// ActGradOp: dx from (saved, dy); saved is relu's, sigmoid's or tanh's output, or swish's /
// gelu's input.
struct ActGradOp final : OpDef {
  explicit ActGradOp(ActKind k) : kind(k) {}
  const OpSchema& schema() const override;
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  static OpSchema& relu_grad_schema();
  static OpSchema& swish_grad_schema();
  static OpSchema& gelu_grad_schema();
  static OpSchema& sigmoid_grad_schema();
  static OpSchema& tanh_grad_schema();
  double flops_per_element() const override {
    switch (kind) {
      case ActKind::kRelu: return 1;
      case ActKind::kSwish: return 7;
      case ActKind::kGelu: return 12;
      case ActKind::kSigmoid: return 3;  // dy y (1 - y)
      case ActKind::kTanh: return 3;     // dy (1 - y^2)
    }
    return 1;
  }
  ActKind kind;
};

// ExpandOp: broadcasts x to `shape` (a copy). DTP: R -> R; S(d) on a dim x holds
// unbroadcast -> S(d) of the output (shard_op: the local target shape); P -> P.
struct ExpandOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  MTC_OP_SCHEMA("expand")
  explicit ExpandOp(Shape s) : shape(std::move(s)) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  std::shared_ptr<const OpDef> shard_op(const partition::Signature& s, std::span<const TensorDesc> in,
                                        const ShardContext& g) const override;
  Shape shape;
};

Tensor expand(const Tensor& x, const Shape& shape);

}  // namespace mtc
