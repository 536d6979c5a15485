// Launchers of synchronised batch norm's CUDA kernels (ew_sync_bn.cu): bn_stats and its
// backward, sync_batch_norm and its backward, on x viewed as (n, c, s). Per-channel sums
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
// bn_partials_bytes: the scratch of launch_bn_stats and launch_sync_bn_backward (two
// partial sums per channel and chunk, in double).
inline size_t bn_partials_bytes(int64_t c, int64_t per_channel) {
  return 2 * static_cast<size_t>(bn_chunks(per_channel)) * static_cast<size_t>(c) * sizeof(double);
}
// sync_bn_forward_bytes: the scratch of launch_sync_bn_forward (each channel's scale and shift).
inline size_t sync_bn_forward_bytes(int64_t c) { return 2 * static_cast<size_t>(c) * sizeof(float); }

// launch_bn_stats: stats f32[5, c] = sum_hi, sum_lo, sumsq_hi, sumsq_lo, count (= n * s).
void launch_bn_stats(const float* x, float* stats, int64_t n, int64_t c, int64_t s, void* scratch,
                     cudaStream_t stream);

// launch_bn_stats_backward: dx = dstats[0] + 2 dstats[2] x, per channel.
void launch_bn_stats_backward(const float* x, const float* dstats, float* dx, int64_t n, int64_t c, int64_t s,
                              cudaStream_t stream);

// launch_sync_bn_forward: y, mean, invstd from the global stats; running_mean and
// running_var (both null: no update) take the global mean and unbiased variance.
void launch_sync_bn_forward(const float* x, const float* gamma, const float* beta, const float* stats,
                            float* y, float* mean, float* invstd, float* running_mean, float* running_var,
                            float momentum, float eps, int64_t n, int64_t c, int64_t s, void* scratch,
                            cudaStream_t stream);

// launch_sync_bn_backward: dx (through y only), dgamma, dbeta and dstats (f32[5, c], rows
// 1, 3 and 4 zero).
void launch_sync_bn_backward(const float* x, const float* gamma, const float* stats, const float* mean,
                             const float* invstd, const float* dy, float* dx, float* dgamma, float* dbeta,
                             float* dstats, int64_t n, int64_t c, int64_t s, void* scratch,
                             cudaStream_t stream);

}  // namespace mtc::cuda
