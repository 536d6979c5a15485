// Launchers of the optimizer step CUDA kernels (ew_optim.cu): SGD and AdamW, elementwise
// and in place. The scalars are the op's fields (AdamW's bias corrections were computed
// on the host in double). Each enqueues on `stream` and returns at once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtc::cuda {

// launch_sgd_step: p -= lr * d, d = g + wd * p, through the momentum buffer when buf is
// not null (set to d when `first`, else buf * m + (1 - dampening) * d; nesterov adds m * buf).
void launch_sgd_step(float* p, const float* g, float* buf, int64_t n, float lr, float momentum,
                     float dampening1, float weight_decay, bool nesterov, bool first, cudaStream_t stream);

// launch_adamw_step: p, exp_avg m and exp_avg_sq v updated in place.
void launch_adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float decay, float beta1,
                       float beta2, float eps, float step_size, float bias_correction2_sqrt,
                       cudaStream_t stream);

}  // namespace mtc::cuda
