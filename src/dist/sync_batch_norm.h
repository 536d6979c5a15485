// Synchronised batch norm as three ops around an all_reduce (include/mtc/distributed.h):
//   stats = bn_stats(x)                       per channel: sum x, sum x^2, count (local)
//   g     = all_reduce(stats, sum)            the whole global batch's sums
//   y, mean, invstd = sync_batch_norm(x, gamma, beta, g[, running_mean, running_var])
// Autograd does the rest: sync_batch_norm's backward gives dx through y directly and a
// gradient for g, the all_reduce's backward sums that over the ranks, and bn_stats's
// backward turns it into the rest of dx. Kernels: src/kernels/cpu/sync_batch_norm.cc.
//
// stats is f32[5, C]: rows sum_hi, sum_lo, sumsq_hi, sumsq_lo, count. Each sum is kept
// in double on a rank and sent as two floats (hi = float(v), lo = float(v - hi)), so that
// the all-reduced sums, and the variance sumsq / n - mean^2 taken from them, keep about
// double precision. Counts are exact up to 2^24 values per channel per rank.
#pragma once

#include "op_def.h"

namespace mtc::dist {

inline constexpr int kStatRows = 5;

// BnStatsOp: x (N, C, ...) -> f32[5, C]. Backward: dx = d_sum + 2 x d_sumsq (from the hi rows).
struct BnStatsOp final : OpDef {
  MTC_OP_SCHEMA("bn_stats")
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
};

// BnStatsBackwardOp: x, dstats -> dx.
struct BnStatsBackwardOp final : OpDef {
  MTC_OP_SCHEMA("bn_stats_backward")
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
};

// SyncBatchNormOp: inputs x, gamma, beta, stats (global, f32[5, C]) and, when tracked,
// running_mean and running_var, updated in place with the global mean and unbiased
// variance. Outputs y, mean, invstd.
struct SyncBatchNormOp final : OpDef {
  MTC_OP_SCHEMA("sync_batch_norm")
  SyncBatchNormOp(float momentum, float eps, bool tracks_running)
      : momentum(momentum), eps(eps), tracks_running(tracks_running) {}
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
};

// SyncBatchNormBackwardOp: x, gamma, stats, mean, invstd, dy -> dx (through y only),
// dgamma, dbeta, dstats (f32[5, C]; the lo rows and the count row are zero).
struct SyncBatchNormBackwardOp final : OpDef {
  MTC_OP_SCHEMA("sync_batch_norm_backward")
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  int num_outputs() const override { return 4; }
};

}  // namespace mtc::dist
