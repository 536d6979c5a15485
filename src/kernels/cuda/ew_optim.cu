// The optimizer step CUDA kernels behind ew_optim_launch.h. Each is the CPU kernel's
// arithmetic (src/kernels/cpu/optim.cc) operation for operation, with every rounding
// spelled out by intrinsics: the CPU build (g++ -O3 -march=x86-64-v3, contraction on)
// fuses exactly these multiply-adds and no others, so writing them as __fmaf_rn and the
// rest as __fmul_rn / __fadd_rn (which nvcc never fuses) gives the CPU's bits.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ew_optim_launch.h"
#include "kernels/cuda/launch.h"

namespace mtc::cuda {
namespace {

constexpr int kThreads = 256;

// CPU, per element: d = fma(wd, p, g) (when wd != 0); b = first ? d : fma(m, buf, damp1 * d);
// d = nesterov ? fma(m, b, d) : b; p = p - lr * d (fused: fma(-lr, d, p)).
__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ buf,
                           int64_t n, float lr, float m, float damp1, float wd, bool nesterov, bool first) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float pi = p[i];
    float d = wd != 0.f ? __fmaf_rn(wd, pi, g[i]) : g[i];
    if (buf != nullptr) {
      const float b = first ? d : __fmaf_rn(m, buf[i], __fmul_rn(damp1, d));
      buf[i] = b;
      d = nesterov ? __fmaf_rn(m, b, d) : b;
    }
    p[i] = __fmaf_rn(-lr, d, pi);
  }
}

// CPU, per element: pi = p * decay; mi = fma(w1, g - m, m); vi = fma(beta2, v, (w2 * g) * g);
// p = pi - step_size * (mi / (sqrt(vi) / bc2 + eps)) (fused: fma(-step_size, q, pi)).
__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, float decay, float w1, float beta2, float w2,
                             float eps, float step_size, float bc2) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float pi = __fmul_rn(p[i], decay);
    const float mi = __fmaf_rn(w1, __fsub_rn(gi, m[i]), m[i]);
    const float vi = __fmaf_rn(beta2, v[i], __fmul_rn(__fmul_rn(w2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float q = __fdiv_rn(mi, __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2), eps));
    p[i] = __fmaf_rn(-step_size, q, pi);
  }
}

}  // namespace

void launch_sgd_step(float* p, const float* g, float* buf, int64_t n, float lr, float momentum,
                     float dampening1, float weight_decay, bool nesterov, bool first, cudaStream_t stream) {
  if (n <= 0) return;
  sgd_kernel<<<blocks(n, kThreads), kThreads, 0, stream>>>(p, g, buf, n, lr, momentum, dampening1,
                                                           weight_decay, nesterov, first);
}

void launch_adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float decay, float beta1,
                       float beta2, float eps, float step_size, float bias_correction2_sqrt,
                       cudaStream_t stream) {
  if (n <= 0) return;
  // The CPU's w1 = 1 - beta1 and w2 = 1 - beta2, rounded to float.
  const float w1 = 1.f - beta1, w2 = 1.f - beta2;
  adamw_kernel<<<blocks(n, kThreads), kThreads, 0, stream>>>(p, g, m, v, n, decay, w1, beta2, w2, eps,
                                                             step_size, bias_correction2_sqrt);
}

}  // namespace mtc::cuda
