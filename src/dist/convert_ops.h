// DTP's placement conversions as ops of the registry: a global tensor held over the ranks
// of a group as Replicated, Split(dim) or Partial (partition/placement.h) is turned into
// another placement, on any dimension and with uneven shards (shard_range: the first
// n % p ranks hold one element more; a dimension smaller than p leaves empty shards).
//
//   from -> to       step (ConvertOp)              backward
//   S(d) -> R        all_gather on d               reduce_scatter (sum) on d: P -> S(d)
//   S(d) -> S(d')    all_to_all                    the inverse all_to_all: S(d') -> S(d)
//   P -> R           all_reduce (sum)              all_reduce (sum): P -> R
//   P -> S(d)        reduce_scatter (sum) on d     all_gather on d: S(d) -> R
//   R -> S(d)        the local slice (SliceOp)     zero-pad back to the whole (slice_backward)
//
// The backward rules hold under the convention of include/mtc/distributed.h: the quantity
// differentiated is the sum of the ranks' losses, and each rank's shard (each rank's copy,
// for R and P) is a variable of its own.
//
// Uneven shards on the wire: all_gather and reduce_scatter pad every rank's block to the
// largest shard (outer * ceil(n / p) * inner elements), so they run on the communicator's
// native, ring-optimal all_gather and reduce_scatter; the padding is at most one slab of
// the dimension (outer * inner elements) per rank. all_to_all sends exact blocks with
// all_to_all_v (no padding). Kernels: src/kernels/cpu/convert.cc, src/kernels/cuda/convert.cc.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/collective_ops.h"
#include "partition/placement.h"

namespace mtc::dist {

// convert: x is this rank's local shard of a global tensor `global` held with placement
// `from` over c's ranks; returns this rank's local shard of the same global tensor held
// with placement `to`. Differentiable; issues one op (or none when from == to).
// Collective: every rank calls it, with the same global, from and to. R -> P and
// S(d) -> P are not conversions (an InvalidArgument error on the returned tensor).
Tensor convert(const Tensor& x, const TensorDesc& global, partition::Placement from, partition::Placement to,
               const CommPtr& c);

// ConvertOp: one collective conversion (all_gather, all_to_all, all_reduce or
// reduce_scatter; the slice is SliceOp). Input: this rank's shard of `global` under
// `from`; output: its shard under `to`. attrs: "all_gather d=1 f32[5,7,3] world=4".
struct ConvertOp final : CollectiveOp {
  MTC_OP_SCHEMA("convert")
  ConvertOp(CommPtr c, TensorDesc g, partition::Placement f, partition::Placement t);
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;

  TensorDesc global;
  partition::Placement from, to;
  partition::Conversion step;  // plan_conversion(from, to)
};

// ConvertKernel: what a conversion's kernel does, worked out once for both devices:
// strided 2-D copies of x into scratch (pack) and zeroed scratch ranges (the padding),
// one collective, then copies into y (unpack). A shard r of dimension d, the tensor
// viewed as (outer, n, inner), is `outer` rows of len_r * inner elements at column
// off_r * inner, row pitch n * inner: each pack or unpack is one such copy. Offsets,
// pitches and widths count elements; each device's kernel takes the plan from
// prepare_kernel and runs the copies with its own engine (memcpy, cudaMemcpy2DAsync) and
// the collective (issue) on its own queue.
struct ConvertKernel {
  enum class Buffer : uint8_t { kX = 0, kY = 1, kScratch = 2 };
  struct Copy {
    Buffer dst, src;
    size_t dst_at, dst_pitch, src_at, src_pitch, width;
    int64_t rows;
  };
  struct Zero {
    size_t at, count;  // in scratch
  };
  size_t scratch = 0;  // elements of scratch the kernel needs
  std::vector<Copy> pack, unpack;
  std::vector<Zero> zero;
  Buffer send = Buffer::kX, recv = Buffer::kY;
  size_t send_at = 0, recv_at = 0;
  size_t count = 0;                              // all_reduce: all; all_gather, reduce_scatter: per rank
  std::vector<size_t> send_counts, recv_counts;  // all_to_all_v
  partition::Step step = partition::Step::kNone;

  // The buffers, bound by prepare_kernel: x, y, scratch; the element size.
  char* base[3] = {};
  size_t element_bytes = 4;
  comm::DataType type = comm::DataType::kF32;

  // at: element i of buffer b, as a byte address.
  char* at(Buffer b, size_t i) const { return base[static_cast<int>(b)] + i * element_bytes; }
  // issue: starts the collective on c, from `send` at send_at to `recv` at recv_at.
  std::shared_ptr<comm::Work> issue(comm::Communicator& c) const;
};
// kernel_plan: op's kernel for x and y of these shapes, on this rank of op.comm.
ConvertKernel kernel_plan(const ConvertOp& op, const Shape& x, const Shape& y);
// prepare_kernel: the plan for a kernel call, its scratch taken from a.ctx and its
// buffers bound.
absl::StatusOr<ConvertKernel> prepare_kernel(const ConvertOp& op, const KernelArgs& a);

// break_convert_backward: TESTING ONLY. The step named by the environment variable
// MTC_TESTING_BREAK_CONVERT_BACKWARD ("all_gather", "all_to_all", "all_reduce" or
// "reduce_scatter"; read once, at the first call) gets a wrong
// backward that keeps only this rank's part of the gradient, with no communication:
// all_gather the local slice instead of the reduce_scatter, reduce_scatter the gradient
// zero-padded instead of gathered, all_reduce the gradient as it is, all_to_all zeros.
// Lets an equivalence test show that it catches a wrong rule (tests/convert_mpitest.cc's
// _broken runs). Never set it outside tests; kNone when unset.
partition::Step break_convert_backward();

}  // namespace mtc::dist
