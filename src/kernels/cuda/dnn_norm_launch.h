// Launchers of the per-channel reductions (dnn_norm.cu) behind batch_norm, its backward
// and conv2d's bias gradient. A tensor is viewed as (n, c, s): c channels, each holding
// n planes of s contiguous values (NCHW with s = H * W, or any (N, C, ...) tensor).
//
// The reductions are deterministic: each channel's n * s values are cut into `parts`
// fixed ranges (from the shape alone, channel_parts), each range summed in double by one
// block in a fixed tree order into a partial, then the partials added in order by one
// thread per channel. Same shape, same bits, whatever the GPU's scheduling: DTE's
// recomputes must reproduce outputs bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mtc::cuda {

// channel_parts: how many ranges each channel's `count` values are cut into: ranges of
// at least ~4096 values, and no more than needed to give the GPU ~2048 blocks in all.
// 0 when there is nothing to sum.
inline int64_t channel_parts(int64_t count, int64_t c) {
  if (count <= 0 || c <= 0) return 0;
  const int64_t by_size = (count + 4095) / 4096;
  const int64_t by_fill = (2048 + c - 1) / c;
  int64_t p = by_size < by_fill ? by_size : by_fill;
  if (p < 1) p = 1;
  if (p > 1024) p = 1024;
  return p;
}

// Partials buffers hold 2 doubles per (channel, part): 2 * c * parts doubles.
inline int64_t channel_partials_doubles(int64_t c, int64_t parts) { return 2 * c * parts; }

// ---- batch_norm forward ----
// launch_bn_moments: per (channel, part), the sums of (x - k) and (x - k)^2 with k the
// channel's first value (x[ch * s]), a shift that keeps the variance free of cancellation.
void launch_bn_moments(const float* x, int64_t n, int64_t c, int64_t s, int64_t parts, double* partial,
                       cudaStream_t stream);
// launch_bn_train_stats: mean and invstd = 1/sqrt(var + eps) (biased var) per channel from
// the partials; running_mean / running_var updated with `momentum` and the unbiased
// variance unless they are null.
void launch_bn_train_stats(const double* partial, const float* x, int64_t n, int64_t c, int64_t s,
                           int64_t parts, float eps, float momentum, float* running_mean, float* running_var,
                           float* mean, float* invstd, cudaStream_t stream);
// launch_bn_eval_stats: mean = running_mean, invstd = 1/sqrt(running_var + eps).
void launch_bn_eval_stats(const float* running_mean, const float* running_var, int64_t c, float eps,
                          float* mean, float* invstd, cudaStream_t stream);
// launch_bn_normalize: y = (x - mean) * (gamma * invstd) + beta per channel.
void launch_bn_normalize(const float* x, const float* gamma, const float* beta, const float* mean,
                         const float* invstd, float* y, int64_t n, int64_t c, int64_t s, cudaStream_t stream);

// ---- batch_norm backward ----
// launch_bn_grad_sums: per (channel, part), the sums of dy and dy * (x - mean).
void launch_bn_grad_sums(const float* x, const float* dy, const float* mean, int64_t n, int64_t c, int64_t s,
                         int64_t parts, double* partial, cudaStream_t stream);
// launch_bn_grad_finalize: dbeta = sum(dy), dgamma = sum(dy * (x - mean)) * invstd, and the
// coefficients (p, q, r) of dx = dy * p + (x - mean) * q + r, 3 floats per channel in coef.
// `count` is n * s; training adds the terms through the batch statistics.
void launch_bn_grad_finalize(const double* partial, const float* gamma, const float* invstd, int64_t c,
                             int64_t count, int64_t parts, bool training, float* dgamma, float* dbeta,
                             float* coef, cudaStream_t stream);
// launch_bn_backward_dx: dx = dy * p + (x - mean) * q + r with coef's per-channel (p, q, r).
void launch_bn_backward_dx(const float* x, const float* dy, const float* mean, const float* coef, float* dx,
                           int64_t n, int64_t c, int64_t s, cudaStream_t stream);

// ---- plain channel sums (conv2d's bias gradient) ----
// launch_channel_sum: out[ch] = the sum of channel ch's n * s values, in double, rounded
// once (0 where the channel is empty). partial: channel_partials_doubles(c, parts) doubles.
void launch_channel_sum(const float* x, int64_t n, int64_t c, int64_t s, int64_t parts, double* partial,
                        float* out, cudaStream_t stream);

}  // namespace mtc::cuda
