// CPU kernels of the optimizer step ops: elementwise, in place, in float in the order of
// PyTorch's single-tensor (for-loop) implementations.
#include <cmath>

#include "kernels/cpu/cpu_util.h"
#include "optim/step_ops.h"

namespace mtc::cpu {
namespace {

// in: param, grad[, buf]. Per element: d = g + wd*p; buf = first ? d : m*buf + (1-damp)*d;
// d = nesterov ? d + m*buf : buf; p = p - lr*d.
absl::Status sgd_step(const optim::SgdStepOp& op, const KernelArgs& a) {
  float* p = a.in[0].f32();
  const float* g = a.in[1].f32();
  float* buf = op.momentum != 0.f ? a.in[2].f32() : nullptr;
  const int64_t n = a.in[0].numel();
  const float lr = op.lr, wd = op.weight_decay, m = op.momentum, damp1 = 1.f - op.dampening;
  const bool first = op.first, nesterov = op.nesterov;
#pragma omp parallel for simd if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    float d = wd != 0.f ? g[i] + wd * p[i] : g[i];
    if (buf != nullptr) {
      const float b = first ? d : buf[i] * m + damp1 * d;
      buf[i] = b;
      d = nesterov ? d + m * b : b;
    }
    p[i] = p[i] - lr * d;
  }
  return absl::OkStatus();
}

// in: param, grad, exp_avg, exp_avg_sq.
absl::Status adamw_step(const optim::AdamWStepOp& op, const KernelArgs& a) {
  float* p = a.in[0].f32();
  const float* g = a.in[1].f32();
  float* m = a.in[2].f32();
  float* v = a.in[3].f32();
  const int64_t n = a.in[0].numel();
  const float decay = op.decay, w1 = 1.f - op.beta1, beta2 = op.beta2, w2 = 1.f - op.beta2, eps = op.eps;
  const float step_size = op.step_size, bc2 = op.bias_correction2_sqrt;
#pragma omp parallel for simd if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const float pi = p[i] * decay;
    const float mi = m[i] + w1 * (g[i] - m[i]);  // lerp with weight < 0.5, as PyTorch
    const float vi = v[i] * beta2 + w2 * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * (mi / (std::sqrt(vi) / bc2 + eps));
  }
  return absl::OkStatus();
}

}  // namespace

MTC_REGISTER_KERNEL(optim::SgdStepOp, DeviceType::kCPU, sgd_step);
MTC_REGISTER_KERNEL(optim::AdamWStepOp, DeviceType::kCPU, adamw_step);

}  // namespace mtc::cpu
