// ReshapeOp: the same elements under a new shape (a copy, so every tensor owns its storage).
// CopyInPlaceOp: one tensor's bytes written over another's (a checkpoint's restore).
#pragma once

#include "op_def.h"
#include "ops/sbp.h"

namespace mtc {

//
// DTP: R -> R; P -> P; S(d) -> S(e) where every rank's shard of input dim d is exactly
// its standard shard (partition::shard_range) of output dim e: the dims before d and
// before e hold the same number of elements, and shard r's offset and size times the
// elements after d equal those of e's shard r times the elements after e. So a dim kept
// as is keeps its split, (N, T, D) S(0) -> (N*T, D) S(0) holds when N's shards are
// N*T's in whole rows of T, and (N, T, D) S(2) -> (N, T, H, D/H) S(2) when D's shards
// are whole heads. shard_op: the local target shape. With no group size known
// (OpDef::signatures), only the splits exact for every p: a dim kept as is.
struct ReshapeOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  MTC_OP_SCHEMA("reshape")
  explicit ReshapeOp(Shape s) : shape(std::move(s)) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  std::shared_ptr<const OpDef> shard_op(const partition::Signature& s, std::span<const TensorDesc> in,
                                        const ShardContext& g) const override;
  Shape shape;  // may hold one -1
};

// CopyInPlaceOp: inputs dst, src of the same shape and dtype; dst's bytes become src's,
// in place (declared by mutates_inputs). No outputs and no gradient: restoring a
// parameter from a checkpoint keeps the tensor that the optimizer and data parallel hold.
struct CopyInPlaceOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  MTC_OP_SCHEMA("copy_")
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  int num_outputs() const override { return 0; }
  uint64_t mutates_inputs() const override { return 0b01; }
};

}  // namespace mtc
