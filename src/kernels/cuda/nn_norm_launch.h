// Launchers of the row-reduction kernels (nn_norm.cu): softmax and log_softmax with their
// gradient, cross_entropy with its gradient, layer_norm with its gradient. Sums run in
// double like the CPU kernels'; every reduction has a fixed order that depends only on
// the shape, so results are bit-identical run to run. Plain C++: included by host code.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mtc::cuda {

// Softmax over lines: x seen as (outer, n, inner), each line n elements `inner` apart.
// log_out: log_softmax. y has x's shape.
void launch_softmax(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, bool log_out,
                    cudaStream_t stream);
// launch_softmax_grad: dx from the forward's output y and dy (SoftmaxGradOp's formulas).
void launch_softmax_grad(const float* y, const float* dy, float* dx, int64_t outer, int64_t n, int64_t inner,
                         bool log_out, cudaStream_t stream);

// cross_entropy_scratch_bytes: the scratch launch_cross_entropy needs for n rows.
size_t cross_entropy_scratch_bytes(int64_t n);
// launch_cross_entropy: out[0] = the sum over the n rows of logsumexp(x[i]) - x[i, labels[i]],
// divided by `divisor` (n for the mean); x (n, c). Labels must have been checked; one
// outside [0, c) gives NaN.
void launch_cross_entropy(const float* x, const int32_t* labels, int64_t n, int64_t c, double divisor, float* out,
                          void* scratch, cudaStream_t stream);
// launch_cross_entropy_grad: dx = (softmax(x) - onehot(labels)) * dy[0] / divisor; dy is on the device.
void launch_cross_entropy_grad(const float* x, const int32_t* labels, const float* dy, int64_t n, int64_t c,
                               double divisor, float* dx, cudaStream_t stream);

// launch_topk: y (rows, k) i32: each row of x (rows, c)'s k largest values' indices,
// largest first, equal values by index, NaN last (TopkOp's order; one thread per row).
void launch_topk(const float* x, int64_t rows, int64_t c, int k, int32_t* y, cudaStream_t stream);

// launch_layer_norm: y = (x - mean) * rstd (* gamma) (+ beta) per row of x (rows, d);
// gamma and beta may be null.
void launch_layer_norm(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
                       int64_t d, float eps, cudaStream_t stream);
// layer_norm_grad_scratch_bytes: the scratch launch_layer_norm_grad needs.
size_t layer_norm_grad_scratch_bytes(int64_t rows, int64_t d);
// launch_layer_norm_grad: dx, and dgamma / dbeta where not null (sums over rows in double,
// fixed row chunks added in order). gamma may be null.
void launch_layer_norm_grad(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                            float* dbeta, int64_t rows, int64_t d, float eps, void* scratch,
                            cudaStream_t stream);

}  // namespace mtc::cuda
