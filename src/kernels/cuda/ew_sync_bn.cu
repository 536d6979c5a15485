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
// the chunk's elements of channel ch: stats: sum x, sum x^2; gradient sums: sum dy,
// sum dy * (x - mean). part is [2][chunks][c].
template <typename I, bool kBackward>
__global__ void bn_partial_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                  const float* __restrict__ mean, double* __restrict__ part, int64_t c,
                                  int64_t s, int64_t per_channel, int64_t chunks, int64_t len) {
  const int lane = threadIdx.x & 31;
  const int64_t items = c * chunks;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const I si = static_cast<I>(s);
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); item < items;
       item += step) {  // warp-uniform
    const int64_t k = item / c;
    const int64_t ch = item - k * c;
    const int64_t e1 = min(per_channel, (k + 1) * len);
    double m = 0;
    if (kBackward) m = static_cast<double>(mean[ch]);
    double a0 = 0, a1 = 0;
    for (int64_t e = k * len + lane; e < e1; e += 32) {
      const I i = static_cast<I>(e) / si;
      const I j = static_cast<I>(e) - i * si;
      const int64_t off = (static_cast<int64_t>(i) * c + ch) * s + j;
      const double v = static_cast<double>(x[off]);
      if (kBackward) {
        const double d = static_cast<double>(dy[off]);
        a0 += d;
        a1 = __fma_rn(d, v - m, a1);
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

// bn_sums_finish_kernel: per channel, the chunks' two partial sums added in order and
// written as hi and lo rows (rows 0-3 of out); stats add the count as row 4 (count >= 0).
__global__ void bn_sums_finish_kernel(const double* __restrict__ part, float* __restrict__ out, int64_t c,
                                      int64_t chunks, float count) {
  const int64_t items = c * chunks;
  for (int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; ch < c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double a = 0, b = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      a += part[k * c + ch];
      b += part[items + k * c + ch];
    }
    split(a, &out[0 * c + ch], &out[1 * c + ch]);
    split(b, &out[2 * c + ch], &out[3 * c + ch]);
    if (count >= 0.f) out[4 * c + ch] = count;
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

__device__ __forceinline__ double joined(const float* rows, int64_t c, int row_hi, int64_t ch) {
  return static_cast<double>(rows[row_hi * c + ch]) + static_cast<double>(rows[(row_hi + 1) * c + ch]);
}

// sync_bn_backward_channel_kernel: per channel, dgamma and dbeta from this rank's sums,
// and p, q, r of dx = dy p + (x - mean) q + r from the global ones (pqr: [3][c]).
__global__ void sync_bn_backward_channel_kernel(const float* __restrict__ gamma, const float* __restrict__ st,
                                                const float* __restrict__ invstd,
                                                const float* __restrict__ local,
                                                const float* __restrict__ global, float* __restrict__ dgamma,
                                                float* __restrict__ dbeta, float* __restrict__ pqr, int64_t c) {
  for (int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; ch < c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double n = st[4 * c + ch];
    const double is = invstd[ch];
    dbeta[ch] = static_cast<float>(joined(local, c, 0, ch));
    dgamma[ch] = static_cast<float>(__dmul_rn(joined(local, c, 2, ch), is));
    const double p = __dmul_rn(static_cast<double>(gamma[ch]), is);
    pqr[ch] = static_cast<float>(p);
    pqr[c + ch] = static_cast<float>(__dmul_rn(__dmul_rn(__dmul_rn(-p, is), is), joined(global, c, 2, ch)) / n);
    pqr[2 * c + ch] = static_cast<float>(__dmul_rn(-p, joined(global, c, 0, ch)) / n);
  }
}

// sync_bn_dx_kernel: dx = dy p + (x - mean) q + r per channel, the CPU kernel's arithmetic
// (its multiply-adds may fuse in another order there: the tests' tolerance covers it).
template <typename I>
__global__ void sync_bn_dx_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                  const float* __restrict__ mean, const float* __restrict__ pqr,
                                  float* __restrict__ dx, int64_t c, int64_t s, int64_t total) {
  const I si = static_cast<I>(s), ci = static_cast<I>(c);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const I ch = (static_cast<I>(i) / si) % ci;
    dx[i] = __fmaf_rn(__fsub_rn(x[i], mean[ch]), pqr[c + ch], __fmaf_rn(dy[i], pqr[ch], pqr[2 * c + ch]));
  }
}

template <bool kBackward>
void launch_partials(const float* x, const float* dy, const float* mean, double* part,
                     int64_t n, int64_t c, int64_t s, cudaStream_t stream) {
  const int64_t per_channel = n * s;
  const int64_t chunks = bn_chunks(per_channel);
  int64_t len = (per_channel + chunks - 1) / chunks;
  if (len < 1) len = 1;
  const unsigned g = blocks(c * chunks * 32, kThreads);
  if (fits32(per_channel)) {
    bn_partial_kernel<uint32_t, kBackward>
        <<<g, kThreads, 0, stream>>>(x, dy, mean, part, c, s, per_channel, chunks, len);
  } else {
    bn_partial_kernel<uint64_t, kBackward>
        <<<g, kThreads, 0, stream>>>(x, dy, mean, part, c, s, per_channel, chunks, len);
  }
}

}  // namespace

void launch_bn_stats(const float* x, float* stats, int64_t n, int64_t c, int64_t s, void* scratch,
                     cudaStream_t stream) {
  if (c <= 0) return;
  auto* part = static_cast<double*>(scratch);
  launch_partials<false>(x, nullptr, nullptr, part, n, c, s, stream);
  bn_sums_finish_kernel<<<blocks(c, kThreads), kThreads, 0, stream>>>(part, stats, c, bn_chunks(n * s),
                                                                      static_cast<float>(n * s));
}

void launch_bn_grad_sums(const float* x, const float* mean, const float* dy, float* sums, int64_t n, int64_t c,
                         int64_t s, void* scratch, cudaStream_t stream) {
  if (c <= 0) return;
  auto* part = static_cast<double*>(scratch);
  launch_partials<true>(x, dy, mean, part, n, c, s, stream);
  bn_sums_finish_kernel<<<blocks(c, kThreads), kThreads, 0, stream>>>(part, sums, c, bn_chunks(n * s), -1.f);
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
                             const float* invstd, const float* dy, const float* sums, const float* global_sums,
                             float* dx, float* dgamma, float* dbeta, int64_t n, int64_t c, int64_t s,
                             void* scratch, cudaStream_t stream) {
  if (c <= 0) return;
  auto* pqr = static_cast<float*>(scratch);
  sync_bn_backward_channel_kernel<<<blocks(c, kThreads), kThreads, 0, stream>>>(gamma, stats, invstd, sums,
                                                                                global_sums, dgamma, dbeta, pqr, c);
  const int64_t total = n * c * s;
  if (total <= 0) return;
  if (fits32(total)) {
    sync_bn_dx_kernel<uint32_t>
        <<<blocks(total, kThreads), kThreads, 0, stream>>>(x, dy, mean, pqr, dx, c, s, total);
  } else {
    sync_bn_dx_kernel<uint64_t>
        <<<blocks(total, kThreads), kThreads, 0, stream>>>(x, dy, mean, pqr, dx, c, s, total);
  }
}

}  // namespace mtc::cuda
