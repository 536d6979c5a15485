// Shape and data-movement ops: permute and transpose, concat, split, slice (and the op
// that pads its gradient back), channel_shuffle. Pure data movement, so f32 and i32 alike.
// Also the dim and input checks that the softmax, layer_norm and embedding ops share.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "op_def.h"
#include "ops/sbp.h"

namespace mtc {

// resolve_dim: dim (negative counts from the end) as an index in [0, ndim), or
// InvalidArgument naming the dim and the valid range.
absl::StatusOr<int> resolve_dim(int dim, int ndim);

// expect_num_inputs: InvalidArgument unless there are exactly n inputs.
absl::Status expect_num_inputs(std::span<const TensorDesc> in, size_t n);
// expect_dtype: InvalidArgument unless `d` has dtype t; `what` names the input ("logits").
absl::Status expect_dtype(const TensorDesc& d, DType t, const char* what);

// DimSplit: a row-major shape seen as (outer, size, inner) around one dim, in elements.
struct DimSplit {
  int64_t outer = 1, size = 1, inner = 1;
};
DimSplit split_at_dim(const Shape& s, int dim);  // dim in [0, s.size())

// resolve_slice: [start, end) on a dim of `size` elements as (first, length), Python's
// way: negative bounds count from the end, both clamp to [0, size], end < start is empty.
std::pair<int64_t, int64_t> resolve_slice(int64_t size, int64_t start, int64_t end);

// PermuteOp: out dim i is input dim perm[i]. As "permute" it holds the full permutation;
// as "transpose" it holds the two dims to swap and works for any rank.
// DTP: R -> R; S(d) -> S(i) where perm[i] = d; P -> P.
struct PermuteOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  PermuteOp(bool is_transpose, std::vector<int> dims) : is_transpose(is_transpose), dims(std::move(dims)) {}
  const OpSchema& schema() const override;
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  // perm: the permutation for an input of `ndim` dims, or InvalidArgument.
  absl::StatusOr<std::vector<int>> perm(int ndim) const;
  static OpSchema& permute_schema();
  static OpSchema& transpose_schema();
  bool is_transpose;
  std::vector<int> dims;  // permute: the permutation; transpose: {d0, d1}
};

// ConcatOp: inputs joined along `dim`; all other dims and the dtype must agree.
// DTP: all R -> R; all S(d), d != dim -> S(d); all P -> P.
struct ConcatOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  MTC_OP_SCHEMA("concat")
  explicit ConcatOp(int dim) : dim(dim) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  int dim;
};

// SplitOp: one input cut along `dim` into sizes.size() outputs; the sizes must add up to
// the dim's extent. DTP: R -> all R; S(d), d != dim -> all S(d); P -> all P.
struct SplitOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  MTC_OP_SCHEMA("split")
  SplitOp(std::vector<int64_t> sizes, int dim) : sizes(std::move(sizes)), dim(dim) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  int num_outputs() const override { return static_cast<int>(sizes.size()); }
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  std::vector<int64_t> sizes;
  int dim;
};

// SliceOp: [start, end) along `dim` (bounds resolved by resolve_slice).
// DTP: R -> R; S(d), d != dim -> S(d); P -> P.
struct SliceOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  MTC_OP_SCHEMA("slice")
  SliceOp(int dim, int64_t start, int64_t end) : dim(dim), start(start), end(end) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  int dim;
  int64_t start, end;
};

// SliceBackwardOp: dy of a slice placed at [start, start + len) of a zero tensor whose
// `dim` has `size` elements: the slice's gradient.
struct SliceBackwardOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  MTC_OP_SCHEMA("slice_backward")
  SliceBackwardOp(int dim, int64_t start, int64_t size) : dim(dim), start(start), size(size) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  int dim;
  int64_t start, size;  // start resolved, in [0, size]
};

// ChannelShuffleOp: x (N, C, *) with C = groups * k; channel i * k + j moves to j * groups + i.
// Its inverse is the shuffle with k groups.
// DTP: R -> R; S(d), d != 1 (not the channels) -> S(d); P -> P.
struct ChannelShuffleOp final : OpDef {
  double flops_per_element() const override { return 0; }  // data movement
  MTC_OP_SCHEMA("channel_shuffle")
  explicit ChannelShuffleOp(int groups) : groups(groups) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  int groups;
};

}  // namespace mtc
