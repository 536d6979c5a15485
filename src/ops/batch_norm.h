// batch_norm as two ops: the forward, which also hands out the statistics it normalised
// with (so the backward needs no second pass), and the backward giving dx, dgamma, dbeta.
// x is (N, C, ...): statistics are per channel C over N and every trailing dim.
#pragma once

#include "op_def.h"
#include "ops/sbp.h"

namespace mtc {

// BatchNormOp: inputs x, gamma (C), beta (C) and, when tracked, running_mean and
// running_var (C). Outputs y (x's shape), mean (C) and invstd (C) = 1/sqrt(var + eps):
// the batch statistics in training (running_mean and running_var are then updated in
// place with `momentum` and the unbiased variance), the running ones in eval.
//
// DTP (inputs x, gamma, beta[, running_mean, running_var]; outputs y, mean, invstd):
//   all R -> R, R, R
//   x S(1), the rest S(0) -> S(1), S(0), S(0)         per channel: exact, train and eval
//   training: x S(0), the rest R -> S(0), R, R        each rank's rows by their own statistics
//             (mean, invstd and the running statistics differ across the ranks, as data
//             parallel's); with --sync_bn the global batch's statistics:
//             shard_run = bn_stats, all_reduce, sync_batch_norm (src/dist/sync_batch_norm.h)
//   eval: x S(d), d not 1, the rest R -> S(d), R, R   the running statistics, local
struct BatchNormOp final : OpDef {
  MTC_OP_SCHEMA("batch_norm")
  BatchNormOp(bool training, float momentum, float eps, bool tracks_running)
      : training(training), momentum(momentum), eps(eps), tracks_running(tracks_running) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  int num_outputs() const override { return 3; }
  uint64_t saves_inputs() const override { return 0b00011; }   // x, gamma
  uint64_t saves_outputs() const override { return 0b110; }    // mean, invstd
  uint64_t mutates_inputs() const override { return training && tracks_running ? 0b11000 : 0; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  std::optional<TensorList> shard_run(const partition::Signature& s, std::span<const TensorDesc> in,
                                      std::span<const Tensor> local_in, const ShardContext& g) const override;
  bool training;
  float momentum;
  float eps;
  bool tracks_running;  // inputs 3 and 4 are present
};

// BatchNormBackwardOp: inputs x, gamma, mean, invstd, dy; outputs dx, dgamma, dbeta. In
// training the batch statistics depend on x, which dx accounts for; in eval they do not.
struct BatchNormBackwardOp final : OpDef {
  MTC_OP_SCHEMA("batch_norm_backward")
  explicit BatchNormBackwardOp(bool training) : training(training) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  OpCost cost(std::span<const TensorDesc> in, std::span<const TensorDesc> out) const override;
  bool differentiable() const override { return false; }
  int num_outputs() const override { return 3; }
  std::string attrs() const override;
  bool training;
};

}  // namespace mtc
