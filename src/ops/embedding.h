// embedding: rows of a weight table gathered by i32 indices, and the gradient op that
// scatter-adds dy back into a (V, D) table in a fixed order (no races, bit-identical
// run to run). An index outside [0, V) fails the kernel with InvalidArgument.
#pragma once

#include "op_def.h"
#include "ops/sbp.h"

namespace mtc {

// EmbeddingOp: weight f32 (V, D), indices i32 (...) -> (..., D).
// Vocabulary shard (global_vocab >= 0): the weight holds rows [offset, offset + V) of a
// table of global_vocab rows; an index in [0, global_vocab) outside them gives a zero row
// (and no gradient), one outside [0, global_vocab) is the error.
//
// DTP:
//   R, R -> R
//   S(1), R -> S(last)        the embedding dim split            [p4]
//   S(0), R -> P              the vocabulary split (shard_op: offset + masking)  [p3]
//   R, S(d) -> S(d)           the indices split                  [p1]
struct EmbeddingOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  MTC_OP_SCHEMA("embedding")
  EmbeddingOp() = default;
  EmbeddingOp(int64_t offset, int64_t global_vocab) : offset(offset), global_vocab(global_vocab) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0b10; }  // indices only
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  std::shared_ptr<const OpDef> shard_op(const partition::Signature& s, std::span<const TensorDesc> in,
                                        const ShardContext& g) const override;
  bool masked() const { return global_vocab >= 0; }
  int64_t offset = 0;         // the first row the weight holds
  int64_t global_vocab = -1;  // -1: the weight is the whole table
};

// EmbeddingGradOp: indices i32 (...), dy f32 (..., D) -> dweight (V, D), where row v
// sums the rows of dy whose index is offset + v, in the order they appear. With
// global_vocab >= 0 (a vocabulary shard), indices outside [offset, offset + V) add nothing.
// Also scatter_add_rows (V = rows). Its gradient in dy gathers the rows back: an
// EmbeddingOp of the same shard.
struct EmbeddingGradOp final : OpDef {
  MTC_OP_SCHEMA("embedding_grad")
  explicit EmbeddingGradOp(int64_t vocab, int64_t offset = 0, int64_t global_vocab = -1)
      : vocab(vocab), offset(offset), global_vocab(global_vocab) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0b01; }  // indices only
  std::string attrs() const override;
  bool masked() const { return global_vocab >= 0; }
  int64_t vocab;  // V
  int64_t offset;
  int64_t global_vocab;
};

}  // namespace mtc
