// The optimizer step ops: each updates one parameter and its state in place (declared
// by mutates_inputs), makes no outputs and has no gradient. Their CPU kernels live in
// src/kernels/cpu/optim.cc.
#pragma once

#include "op_def.h"
#include "ops/sbp.h"

namespace mtc::optim {

// SgdStepOp: inputs param, grad[, momentum_buf when momentum != 0]; param and the buffer
// are written. `first`: the buffer is set to d instead of blended (PyTorch's first step).
// DTP of both step ops (elementwise, in place, no outputs): every input R, or every
// input S(d) for each dim d of the parameter (a parameter stored as shards).
struct SgdStepOp final : OpDef {
  double flops_per_element() const override { return 5; }  // decay, momentum, update
  MTC_OP_SCHEMA("sgd_step")
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  int num_outputs() const override { return 0; }
  uint64_t mutates_inputs() const override { return momentum != 0.f ? 0b101 : 0b001; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  float lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, first = false;
};

// AdamWStepOp: inputs param, grad, exp_avg, exp_avg_sq; all but grad are written.
// step_size = lr / (1 - beta1^t) and bias_correction2_sqrt = sqrt(1 - beta2^t) are
// computed on the host in double, as PyTorch does with Python floats.
struct AdamWStepOp final : OpDef {
  double flops_per_element() const override { return 14; }  // two moments, sqrt, divide
  MTC_OP_SCHEMA("adamw_step")
  absl::Status infer(std::span<const TensorDesc> in, std::vector<TensorDesc>& out) const override;
  bool differentiable() const override { return false; }
  int num_outputs() const override { return 0; }
  uint64_t mutates_inputs() const override { return 0b1101; }
  std::string attrs() const override;
  void signatures(std::span<const TensorDesc> in, int parts, partition::SignatureList& out) const override;
  float decay = 1;  // 1 - lr * weight_decay
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float step_size = 0, bias_correction2_sqrt = 1;
};

}  // namespace mtc::optim
