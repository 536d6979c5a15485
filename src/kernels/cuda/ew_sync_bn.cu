// Synchronised batch norm's CUDA kernels behind ew_sync_bn_launch.h. x is (n, c, s).
// Per-channel sums: each channel's n * s elements are cut into fixed chunks (bn_chunks);
// a warp sums a chunk in double (lanes striding by 32, then a fixed shuffle tree), and a
// thread per channel adds the chunks in order, so the sums depend on the shape alone.
// The per-channel scalars and the elementwise passes are the CPU kernel's arithmetic
// (src/kernels/cpu/sync_batch_norm.cc) with its fused multiply-adds written out as
// fma intrinsics (the CPU build, g++ -O3 -march=x86-64-v3, fuses those ones).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/ew_sync_bn_launch.h"
#include "kernels/cuda/launch.h"

namespace mtc::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

inline bool fits32(int64_t n) { return n < (int64_t{1} << 31); }

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int k = 16; k > 0; k >>= 1) v += __shfl_down_sync(0xffffffffu, v, k);
  return v;  // lane 0 holds the sum
}

// bn_partial_kernel: for item = chunk * c + ch (one warp each), the two partial sums of
// the chunk's elements of channel ch: stats: sum x, sum x^2; backward: sum dy,
// sum dy * (x - mean) * invstd. part is [2][chunks][c].
template <typename I, bool kBackward>
__global__ void bn_partial_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                  const float* __restrict__ mean, const float* __restrict__ invstd,
                                  double* __restrict__ part, int64_t c, int64_t s, int64_t per_channel,
                                  int64_t chunks, int64_t len) {
  const int lane = threadIdx.x & 31;
  const int64_t items = c * chunks;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const I si = static_cast<I>(s);
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); item < items;
       item += step) {  // warp-uniform
    const int64_t k = item / c;
    const int64_t ch = item - k * c;
    const int64_t e1 = min(per_channel, (k + 1) * len);
    double m = 0, is = 0;
    if (kBackward) {
      m = static_cast<double>(mean[ch]);
      is = static_cast<double>(invstd[ch]);
    }
    double a0 = 0, a1 = 0;
    for (int64_t e = k * len + lane; e < e1; e += 32) {
      const I i = static_cast<I>(e) / si;
      const I j = static_cast<I>(e) - i * si;
      const int64_t off = (static_cast<int64_t>(i) * c + ch) * s + j;
      const double v = static_cast<double>(x[off]);
      if (kBackward) {
        const double d = static_cast<double>(dy[off]);
        a0 += d;
        a1 = __fma_rn(d, (v - m) * is, a1);
      } else {
        a0 += v;
        a1 = __fma_rn(v, v, a1);
      }
    }
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
    if (lane == 0) {
      part[item] = a0;
      part[items + item] = a1;
    }
  }
}

// split: v as two floats whose sum is v to about double precision.
__device__ __forceinline__ void split(double v, float* hi, float* lo) {
  *hi = static_cast<float>(v);
  *lo = static_cast<float>(v - static_cast<double>(*hi));
}

__global__ void bn_stats_finish_kernel(const double* __restrict__ part, float* __restrict__ st, int64_t c,
                                       int64_t chunks, float count) {
  const int64_t items = c * chunks;
  for (int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; ch < c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sum = 0, sumsq = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      sum += part[k * c + ch];
      sumsq += part[items + k * c + ch];
    }
    split(sum, &st[0 * c + ch], &st[1 * c + ch]);
    split(sumsq, &st[2 * c + ch], &st[3 * c + ch]);
    st[4 * c + ch] = count;
  }
}

// bn_stats_backward_kernel: dx = fma(2 * d_sumsq, x, d_sum) over n * c * s elements.
template <typename I>
__global__ void bn_stats_backward_kernel(const float* __restrict__ x, const float* __restrict__ d,
                                         float* __restrict__ dx, int64_t c, int64_t s, int64_t total) {
  const I si = static_cast<I>(s), ci = static_cast<I>(c);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const I ch = (static_cast<I>(i) / si) % ci;
    const float d_sumsq2 = 2.f * d[2 * c + ch];
    dx[i] = __fmaf_rn(d_sumsq2, x[i], d[ch]);
  }
}

// sync_bn_channel_kernel: per channel, mean and invstd from the global sums, the scale k
// and shift b of y = k x + b (kb: [2][c]), and the running statistics' update.
__global__ void sync_bn_channel_kernel(const float* __restrict__ gamma, const float* __restrict__ beta,
                                       const float* __restrict__ st, float* __restrict__ mean_out,
                                       float* __restrict__ invstd_out, float* __restrict__ rm,
                                       float* __restrict__ rv, float* __restrict__ kb, float momentum,
                                       float eps, int64_t c) {
  for (int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; ch < c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double n = st[4 * c + ch];
    const double mean = (static_cast<double>(st[0 * c + ch]) + static_cast<double>(st[1 * c + ch])) / n;
    const double ex2 = (static_cast<double>(st[2 * c + ch]) + static_cast<double>(st[3 * c + ch])) / n;
    double var = __fma_rn(-mean, mean, ex2);
    var = var < 0.0 ? 0.0 : var;  // std::max(var, 0.0): a NaN stays NaN
    const double invstd = 1.0 / sqrt(var + static_cast<double>(eps));
    const float mean_f = static_cast<float>(mean), invstd_f = static_cast<float>(invstd);
    mean_out[ch] = mean_f;
    invstd_out[ch] = invstd_f;
    const float k = __fmul_rn(invstd_f, gamma[ch]);
    kb[ch] = k;
    kb[c + ch] = __fmaf_rn(-mean_f, k, beta[ch]);  // beta - mean * k, fused
    if (rm != nullptr) {
      const double mom = momentum;
      rm[ch] = static_cast<float>(__fma_rn(1.0 - mom, static_cast<double>(rm[ch]), mean * mom));
      rv[ch] =
          static_cast<float>(__fma_rn(1.0 - mom, static_cast<double>(rv[ch]), n * (var * mom) / (n - 1.0)));
    }
  }
}

// sync_bn_apply_kernel: y = fma(k, x, b) per channel.
template <typename I>
__global__ void sync_bn_apply_kernel(const float* __restrict__ x, const float* __restrict__ kb,
                                     float* __restrict__ y, int64_t c, int64_t s, int64_t total) {
  const I si = static_cast<I>(s), ci = static_cast<I>(c);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const I ch = (static_cast<I>(i) / si) % ci;
    y[i] = __fmaf_rn(kb[ch], x[i], kb[c + ch]);
  }
}

// sync_bn_backward_finish_kernel: per channel, dgamma, dbeta and dstats from the sums.
__global__ void sync_bn_backward_finish_kernel(const double* __restrict__ part,
                                               const float* __restrict__ gamma, const float* __restrict__ st,
                                               const float* __restrict__ mean,
                                               const float* __restrict__ invstd, float* __restrict__ dgamma,
                                               float* __restrict__ dbeta, float* __restrict__ dst, int64_t c,
                                               int64_t chunks) {
  const int64_t items = c * chunks;
  for (int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; ch < c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      sum_dy += part[k * c + ch];
      sum_dy_xhat += part[items + k * c + ch];
    }
    const double n = st[4 * c + ch];
    const double m = mean[ch], is = invstd[ch], g = gamma[ch];
    dgamma[ch] = static_cast<float>(sum_dy_xhat);
    dbeta[ch] = static_cast<float>(sum_dy);
    const double d_mean = __dmul_rn(__dmul_rn(-g, is), sum_dy);
    const double d_var = __dmul_rn(__dmul_rn(__dmul_rn(-0.5 * g, sum_dy_xhat), is), is);
    dst[0 * c + ch] = static_cast<float>(__dsub_rn(d_mean / n, __dmul_rn(2.0 * m, d_var) / n));
    dst[1 * c + ch] = 0.f;
    dst[2 * c + ch] = static_cast<float>(d_var / n);
    dst[3 * c + ch] = 0.f;
    dst[4 * c + ch] = 0.f;
  }
}

// sync_bn_dx_kernel: dx = dy * float(gamma * invstd) per channel (the part through y).
template <typename I>
__global__ void sync_bn_dx_kernel(const float* __restrict__ dy, const float* __restrict__ gamma,
                                  const float* __restrict__ invstd, float* __restrict__ dx, int64_t c,
                                  int64_t s, int64_t total) {
  const I si = static_cast<I>(s), ci = static_cast<I>(c);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const I ch = (static_cast<I>(i) / si) % ci;
    const float k = static_cast<float>(static_cast<double>(gamma[ch]) * static_cast<double>(invstd[ch]));
    dx[i] = dy[i] * k;
  }
}

template <bool kBackward>
void launch_partials(const float* x, const float* dy, const float* mean, const float* invstd, double* part,
                     int64_t n, int64_t c, int64_t s, cudaStream_t stream) {
  const int64_t per_channel = n * s;
  const int64_t chunks = bn_chunks(per_channel);
  int64_t len = (per_channel + chunks - 1) / chunks;
  if (len < 1) len = 1;
  const unsigned g = blocks(c * chunks * 32, kThreads);
  if (fits32(per_channel)) {
    bn_partial_kernel<uint32_t, kBackward>
        <<<g, kThreads, 0, stream>>>(x, dy, mean, invstd, part, c, s, per_channel, chunks, len);
  } else {
    bn_partial_kernel<uint64_t, kBackward>
        <<<g, kThreads, 0, stream>>>(x, dy, mean, invstd, part, c, s, per_channel, chunks, len);
  }
}

}  // namespace

void launch_bn_stats(const float* x, float* stats, int64_t n, int64_t c, int64_t s, void* scratch,
                     cudaStream_t stream) {
  if (c <= 0) return;
  auto* part = static_cast<double*>(scratch);
  launch_partials<false>(x, nullptr, nullptr, nullptr, part, n, c, s, stream);
  bn_stats_finish_kernel<<<blocks(c, kThreads), kThreads, 0, stream>>>(part, stats, c, bn_chunks(n * s),
                                                                       static_cast<float>(n * s));
}

void launch_bn_stats_backward(const float* x, const float* dstats, float* dx, int64_t n, int64_t c, int64_t s,
                              cudaStream_t stream) {
  const int64_t total = n * c * s;
  if (total <= 0) return;
  if (fits32(total)) {
    bn_stats_backward_kernel<uint32_t>
        <<<blocks(total, kThreads), kThreads, 0, stream>>>(x, dstats, dx, c, s, total);
  } else {
    bn_stats_backward_kernel<uint64_t>
        <<<blocks(total, kThreads), kThreads, 0, stream>>>(x, dstats, dx, c, s, total);
  }
}

void launch_sync_bn_forward(const float* x, const float* gamma, const float* beta, const float* stats,
                            float* y, float* mean, float* invstd, float* running_mean, float* running_var,
                            float momentum, float eps, int64_t n, int64_t c, int64_t s, void* scratch,
                            cudaStream_t stream) {
  if (c <= 0) return;
  auto* kb = static_cast<float*>(scratch);
  sync_bn_channel_kernel<<<blocks(c, kThreads), kThreads, 0, stream>>>(
      gamma, beta, stats, mean, invstd, running_mean, running_var, kb, momentum, eps, c);
  const int64_t total = n * c * s;
  if (total <= 0) return;
  if (fits32(total)) {
    sync_bn_apply_kernel<uint32_t><<<blocks(total, kThreads), kThreads, 0, stream>>>(x, kb, y, c, s, total);
  } else {
    sync_bn_apply_kernel<uint64_t><<<blocks(total, kThreads), kThreads, 0, stream>>>(x, kb, y, c, s, total);
  }
}

void launch_sync_bn_backward(const float* x, const float* gamma, const float* stats, const float* mean,
                             const float* invstd, const float* dy, float* dx, float* dgamma, float* dbeta,
                             float* dstats, int64_t n, int64_t c, int64_t s, void* scratch,
                             cudaStream_t stream) {
  if (c <= 0) return;
  auto* part = static_cast<double*>(scratch);
  launch_partials<true>(x, dy, mean, invstd, part, n, c, s, stream);
  sync_bn_backward_finish_kernel<<<blocks(c, kThreads), kThreads, 0, stream>>>(
      part, gamma, stats, mean, invstd, dgamma, dbeta, dstats, c, bn_chunks(n * s));
  const int64_t total = n * c * s;
  if (total <= 0) return;
  if (fits32(total)) {
    sync_bn_dx_kernel<uint32_t>
        <<<blocks(total, kThreads), kThreads, 0, stream>>>(dy, gamma, invstd, dx, c, s, total);
  } else {
    sync_bn_dx_kernel<uint64_t>
        <<<blocks(total, kThreads), kThreads, 0, stream>>>(dy, gamma, invstd, dx, c, s, total);
  }
}

}  // namespace mtc::cuda
