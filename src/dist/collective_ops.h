// The collective ops: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast and
// barrier as ops of the registry (their kernels call the op's Communicator), the in-place
// broadcast for parameters, the two halves of a data-parallel bucket reduction, and the
// mask that routes a max-reduction's gradient. Kernels: src/kernels/cpu/collective.cc.
//
// None of them is recomputable: DTE never drops their outputs (a rerun on one rank alone
// would wait forever for the others).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "mtc/distributed.h"
#include "op_def.h"

namespace mtc::dist {

comm::ReduceOp to_comm(Reduce r);
absl::StatusOr<comm::DataType> to_comm(DType t);

// wait: waits for `w`, a collective named `name` over `bytes` of this rank's data, and
// gives its run on the communicator's queue to the kernel's context (the Chrome trace's
// comm track) when the backend can say when that was.
absl::Status wait(comm::Work& w, const char* name, size_t bytes, KernelContext& ctx);

// issue_and_wait: `issue()` starts a collective (returns its Work), which is then waited
// for (as wait above) before anything else is issued: the promise of comm::WaitsAtOnce,
// under which a host backend runs it on this thread without waking its comm thread.
template <typename Issue>
absl::Status issue_and_wait(Issue issue, const char* name, size_t bytes, KernelContext& ctx) {
  std::shared_ptr<comm::Work> work;
  {
    comm::WaitsAtOnce promise;
    work = issue();
  }
  return wait(*work, name, bytes, ctx);
}

// CollectiveOp: what every collective op shares: its communicator.
struct CollectiveOp : OpDef {
  explicit CollectiveOp(CommPtr c) : comm(std::move(c)) {}
  bool recomputable() const override { return false; }
  double flops_per_element() const override { return 0; }
  std::string attrs() const override;  // "world=4"
  CommPtr comm;
};

// ReducingOp: a collective that reduces with `reduce`. A max's backward needs x and y
// (the gradient goes where they are equal); a sum's or an average's needs neither.
struct ReducingOp : CollectiveOp {
  ReducingOp(CommPtr c, Reduce r) : CollectiveOp(std::move(c)), reduce(r) {}
  uint64_t saves_inputs() const override { return reduce == Reduce::kMax ? 1 : 0; }
  uint64_t saves_outputs() const override { return reduce == Reduce::kMax ? 1 : 0; }
  std::string attrs() const override;  // "op=sum world=4"
  Reduce reduce;
};

struct AllReduceOp final : ReducingOp {
  MTC_OP_SCHEMA("all_reduce")
  using ReducingOp::ReducingOp;
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
};

struct AllGatherOp final : CollectiveOp {
  MTC_OP_SCHEMA("all_gather")
  using CollectiveOp::CollectiveOp;
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
};

struct ReduceScatterOp final : ReducingOp {
  MTC_OP_SCHEMA("reduce_scatter")
  using ReducingOp::ReducingOp;
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
};

// AllToAllOp: even when send_rows is empty, else uneven (rows of dim 0 per rank).
struct AllToAllOp final : CollectiveOp {
  MTC_OP_SCHEMA("all_to_all")
  AllToAllOp(CommPtr c, std::vector<int64_t> send, std::vector<int64_t> recv)
      : CollectiveOp(std::move(c)), send_rows(std::move(send)), recv_rows(std::move(recv)) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  // element_counts: the uneven exchange in elements per rank (rows times the elements of
  // one row of x or y), for Communicator::all_to_all_v.
  void element_counts(const TensorView& x, const TensorView& y, std::vector<size_t>& send,
                      std::vector<size_t>& recv) const;
  std::vector<int64_t> send_rows, recv_rows;
};

struct BroadcastOp final : CollectiveOp {
  MTC_OP_SCHEMA("broadcast")
  BroadcastOp(CommPtr c, int r) : CollectiveOp(std::move(c)), root(r) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return 0; }
  std::string attrs() const override;
  int root;
};

// BroadcastInPlaceOp: input 0 is overwritten with root's; no outputs.
struct BroadcastInPlaceOp final : CollectiveOp {
  MTC_OP_SCHEMA("broadcast_")
  BroadcastInPlaceOp(CommPtr c, int r) : CollectiveOp(std::move(c)), root(r) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  int num_outputs() const override { return 0; }
  uint64_t mutates_inputs() const override { return 1; }
  std::string attrs() const override;
  int root;
};

struct BarrierOp final : CollectiveOp {
  MTC_OP_SCHEMA("barrier")
  using CollectiveOp::CollectiveOp;
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  int num_outputs() const override { return 0; }
};

// MaxGradMaskOp: inputs x, y, g of one shape -> g where x == y, else 0.
struct MaxGradMaskOp final : OpDef {
  MTC_OP_SCHEMA("max_grad_mask")
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
};

// BucketState: one data-parallel bucket, shared by its two ops and DataParallel.
struct BucketState {
  std::shared_ptr<comm::Work> work;  // the all-reduce in flight
  std::shared_ptr<DataParallelFigures> figures;
  comm::ReduceOp reduce = comm::ReduceOp::kAvg;  // DataParallelOptions::reduce
  float scale = 1.f;                              // DataParallelOptions::scale, at unpacking
};

// BucketReduceOp: inputs flat, g1..gk. Packs the gradients into flat, one after another
// from element 0, and starts the all-reduce of those elements (average, or sum:
// BucketState::reduce) on the communicator's queue; returns without waiting for it. The
// gradients may be any of the bucket's (those that got one this iteration, Note [Unused
// parameters] in data_parallel.cc); the ranks must pass the same ones.
struct BucketReduceOp final : CollectiveOp {
  MTC_OP_SCHEMA("bucket_reduce")
  BucketReduceOp(CommPtr c, std::shared_ptr<BucketState> s) : CollectiveOp(std::move(c)), state(std::move(s)) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  int num_outputs() const override { return 0; }
  uint64_t mutates_inputs() const override { return 1; }
  uint64_t holds_inputs() const override { return 1; }  // flat, until its bucket_wait
  std::shared_ptr<BucketState> state;
};

// BucketWaitOp: inputs flat, g1..gk, as its BucketReduceOp had them. Waits for the
// bucket's all-reduce and unpacks the averaged gradients from flat into g1..gk (in
// place), times BucketState::scale.
struct BucketWaitOp final : CollectiveOp {
  MTC_OP_SCHEMA("bucket_wait")
  BucketWaitOp(CommPtr c, std::shared_ptr<BucketState> s) : CollectiveOp(std::move(c)), state(std::move(s)) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  int num_outputs() const override { return 0; }
  uint64_t mutates_inputs() const override { return ~uint64_t{0} << 1; }
  uint64_t releases_inputs() const override { return 1; }
  std::shared_ptr<BucketState> state;
};

inline constexpr int kMaxBucketTensors = 63;  // gradients per bucket: the mutation mask's width

}  // namespace mtc::dist
