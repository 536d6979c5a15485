// ReshapeOp: the same elements under a new shape (a copy, so every tensor owns its storage).
#pragma once

#include "op_def.h"

namespace mtc {

struct ReshapeOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  MTC_OP_SCHEMA("reshape")
  explicit ReshapeOp(Shape s) : shape(std::move(s)) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  Shape shape;  // may hold one -1
};

}  // namespace mtc
