// layer_norm over the last dim: y = (x - mean) / sqrt(var + eps) * gamma + beta, with the
// biased variance of each row (as torch.nn.LayerNorm); gamma and beta optional. Its
// gradient op recomputes each row's statistics from x instead of saving them.
#pragma once

#include "op_def.h"
#include "ops/sbp.h"

namespace mtc {

// LayerNormOp: inputs x (..., D), then gamma (D) if has_gamma, then beta (D) if has_beta.
// DTP: R -> R; x S(d), d not the last (normalised) dim, gamma and beta R -> S(d).
struct LayerNormOp final : OpDef {
  double flops_per_element() const override { return 8; }  // mean, variance, normalise, affine
  MTC_OP_SCHEMA("layer_norm")
  LayerNormOp(float eps, bool has_gamma, bool has_beta) : eps(eps), has_gamma(has_gamma), has_beta(has_beta) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  absl::StatusOr<TensorList> backward(const BackwardArgs& a) const override;
  uint64_t saves_inputs() const override { return has_gamma ? 0b11 : 0b1; }  // x, gamma
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  float eps;
  bool has_gamma, has_beta;
};

// LayerNormGradOp: inputs x, gamma (if has_gamma), dy; outputs dx, then dgamma (D) if
// has_gamma, then dbeta (D) if has_beta.
struct LayerNormGradOp final : OpDef {
  double flops_per_element() const override { return 12; }
  MTC_OP_SCHEMA("layer_norm_grad")
  LayerNormGradOp(float eps, bool has_gamma, bool has_beta) : eps(eps), has_gamma(has_gamma), has_beta(has_beta) {}
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  int num_outputs() const override { return 1 + has_gamma + has_beta; }
  std::string attrs() const override;
  float eps;
  bool has_gamma, has_beta;
};

}  // namespace mtc
