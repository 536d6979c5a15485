// CUDA kernels of the optimizer step ops (src/optim/step_ops.h): SGD and AdamW, in place
// on the parameter and its state, with the op's scalars as the CPU kernel uses them (the
// AdamW bias corrections come computed in double on the host). The arithmetic matches
// src/kernels/cpu/optim.cc rounding for rounding (see ew_optim.cu).
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/ew_optim_launch.h"
#include "optim/step_ops.h"

namespace mtc::cuda {
namespace {

// in: param, grad[, momentum_buf when momentum != 0].
absl::Status sgd_step(const optim::SgdStepOp& op, const KernelArgs& a) {
  float* buf = op.momentum != 0.f ? a.in[2].f32() : nullptr;
  launch_sgd_step(a.in[0].f32(), a.in[1].f32(), buf, a.in[0].numel(), op.lr, op.momentum, 1.f - op.dampening,
                  op.weight_decay, op.nesterov, op.first, stream(a.ctx));
  return last_launch("sgd_step");
}

// in: param, grad, exp_avg, exp_avg_sq.
absl::Status adamw_step(const optim::AdamWStepOp& op, const KernelArgs& a) {
  launch_adamw_step(a.in[0].f32(), a.in[1].f32(), a.in[2].f32(), a.in[3].f32(), a.in[0].numel(), op.decay,
                    op.beta1, op.beta2, op.eps, op.step_size, op.bias_correction2_sqrt, stream(a.ctx));
  return last_launch("adamw_step");
}

}  // namespace

MTC_REGISTER_KERNEL(optim::SgdStepOp, DeviceType::kCUDA, sgd_step);
MTC_REGISTER_KERNEL(optim::AdamWStepOp, DeviceType::kCUDA, adamw_step);

}  // namespace mtc::cuda
