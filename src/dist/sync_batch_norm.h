// Synchronised batch norm as three ops around an all_reduce (include/mtc/distributed.h):
//   stats = bn_stats(x)                       per channel: sum x, sum x^2, count (local)
//   g     = all_reduce(stats, sum)            the whole global batch's sums
//   y, mean, invstd = sync_batch_norm(x, gamma, beta, g[, running_mean, running_var])
// The backward is sync_batch_norm's alone, and has the shape of torch.nn.SyncBatchNorm's:
//   sums  = bn_grad_sums(x, mean, dy)         per channel: sum dy, sum dy (x - mean) (local)
//   G     = all_reduce(sums, sum)             over the op's communicator (none: G = sums)
//   dx, dgamma, dbeta = sync_batch_norm_backward(x, gamma, g, mean, invstd, dy, sums, G)
// dx is the whole gradient, through y and through the statistics, so g carries none and
// bn_stats is not differentiable. That is two passes over x and dy, as batch_norm's
// backward, and one small all-reduce; a gradient through g took four passes (dx through
// y, dx through the sums, their add).
// Kernels: src/kernels/cpu/sync_batch_norm.cc, src/kernels/cuda/sync_batch_norm.cc.
//
// stats is f32[5, C]: rows sum_hi, sum_lo, sumsq_hi, sumsq_lo, count; sums is f32[4, C]:
// sum_dy_hi, sum_dy_lo, sum_dyxc_hi, sum_dyxc_lo. Each sum is kept in double on a rank
// and sent as two floats (hi = float(v), lo = float(v - hi)), so that the all-reduced
// sums, and the variance sumsq / n - mean^2 taken from them, keep about double
// precision. Counts are exact up to 2^24 values per channel per rank.
#pragma once

#include <memory>

#include "mtc/distributed.h"
#include "op_def.h"

namespace mtc::dist {

inline constexpr int kStatRows = 5;
inline constexpr int kGradSumRows = 4;

// BnStatsOp: x (N, C, ...) -> f32[5, C]. Not differentiable: sync_batch_norm's backward
// carries the gradient through the statistics.
struct BnStatsOp final : OpDef {
  MTC_OP_SCHEMA("bn_stats")
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  bool differentiable() const override { return false; }
};

// SyncBatchNormOp: inputs x, gamma, beta, stats (global, f32[5, C]) and, when tracked,
// running_mean and running_var, updated in place with the global mean and unbiased
// variance. Outputs y, mean, invstd. comm: the ranks stats was all-reduced over, whose
// gradient sums the backward all-reduces the same way (null: stats is this rank's own).
struct SyncBatchNormOp final : OpDef {
  MTC_OP_SCHEMA("sync_batch_norm")
  SyncBatchNormOp(float momentum, float eps, bool tracks_running, CommPtr comm = nullptr)
      : momentum(momentum), eps(eps), tracks_running(tracks_running), comm(std::move(comm)) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  int num_outputs() const override { return 3; }
  uint64_t saves_inputs() const override { return 0b1011; }  // x, gamma, stats
  uint64_t saves_outputs() const override { return 0b110; }  // mean, invstd
  uint64_t mutates_inputs() const override { return tracks_running ? 0b110000 : 0; }
  std::string attrs() const override;
  float momentum, eps;
  bool tracks_running;
  CommPtr comm;
};

// BnGradSumsOp: x, mean (f32[C]), dy -> f32[4, C]: this rank's sum dy and
// sum dy (x - mean) per channel, each as hi and lo rows.
struct BnGradSumsOp final : OpDef {
  MTC_OP_SCHEMA("bn_grad_sums")
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  bool differentiable() const override { return false; }
};

// SyncBatchNormBackwardOp: x, gamma, stats, mean, invstd, dy, sums (this rank's),
// global_sums -> dx (through y and the statistics, from the global sums), dgamma and
// dbeta (this rank's share, from its own sums: data parallel or DTP adds them up).
struct SyncBatchNormBackwardOp final : OpDef {
  MTC_OP_SCHEMA("sync_batch_norm_backward")
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  bool differentiable() const override { return false; }
  int num_outputs() const override { return 3; }
};

}  // namespace mtc::dist
