// Launchers of synchronised batch norm's CUDA kernels (ew_sync_bn.cu): bn_stats,
// sync_batch_norm, bn_grad_sums and sync_batch_norm_backward, on x viewed as (n, c, s). Per-channel sums
// run in double in an order fixed by the shape (deterministic); the per-channel scalars
// are computed as the CPU kernel does (src/kernels/cpu/sync_batch_norm.cc). Each enqueues
// on `stream` and returns at once; scratch is device memory the caller provides.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtc::cuda {

// bn_chunks: each channel's n * s elements are summed in this many runs (a warp each),
// whose partial sums a second kernel adds in order.
inline int64_t bn_chunks(int64_t per_channel) {
  constexpr int64_t kChunk = 8192;  // elements per warp: 256 per lane
  const int64_t k = (per_channel + kChunk - 1) / kChunk;
  return k < 1 ? 1 : k;
}
// bn_partials_bytes: the scratch of launch_bn_stats and launch_bn_grad_sums (two partial
// sums per channel and chunk, in double).
inline size_t bn_partials_bytes(int64_t c, int64_t per_channel) {
  return 2 * static_cast<size_t>(bn_chunks(per_channel)) * static_cast<size_t>(c) * sizeof(double);
}
// sync_bn_forward_bytes: the scratch of launch_sync_bn_forward (each channel's scale and shift).
inline size_t sync_bn_forward_bytes(int64_t c) { return 2 * static_cast<size_t>(c) * sizeof(float); }
// sync_bn_backward_bytes: the scratch of launch_sync_bn_backward (each channel's p, q, r).
inline size_t sync_bn_backward_bytes(int64_t c) { return 3 * static_cast<size_t>(c) * sizeof(float); }

// launch_bn_stats: stats f32[5, c] = sum_hi, sum_lo, sumsq_hi, sumsq_lo, count (= n * s).
void launch_bn_stats(const float* x, float* stats, int64_t n, int64_t c, int64_t s, void* scratch,
                     cudaStream_t stream);

// launch_sync_bn_forward: y, mean, invstd from the global stats; running_mean and
// running_var (both null: no update) take the global mean and unbiased variance.
void launch_sync_bn_forward(const float* x, const float* gamma, const float* beta, const float* stats,
                            float* y, float* mean, float* invstd, float* running_mean, float* running_var,
                            float momentum, float eps, int64_t n, int64_t c, int64_t s, void* scratch,
                            cudaStream_t stream);

// launch_bn_grad_sums: sums f32[4, c] = sum dy, sum dy (x - mean), each as hi and lo rows.
void launch_bn_grad_sums(const float* x, const float* mean, const float* dy, float* sums, int64_t n, int64_t c,
                         int64_t s, void* scratch, cudaStream_t stream);

// launch_sync_bn_backward: dx through y and the statistics from the global sums; dgamma
// and dbeta from this rank's sums.
void launch_sync_bn_backward(const float* x, const float* gamma, const float* stats, const float* mean,
                             const float* invstd, const float* dy, const float* sums, const float* global_sums,
                             float* dx, float* dgamma, float* dbeta, int64_t n, int64_t c, int64_t s,
                             void* scratch, cudaStream_t stream);

}  // namespace mtc::cuda
