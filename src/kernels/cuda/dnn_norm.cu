// CUDA kernels of the per-channel reductions and the elementwise passes of batch_norm
// (forward and backward) and of conv2d's bias gradient; see dnn_norm_launch.h for the
// (n, c, s) view and why the sums take a fixed two-level order in double.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/dnn_norm_launch.h"
#include "kernels/cuda/launch.h"

namespace mtc::cuda {
namespace {

constexpr int kThreads = 256;  // every kernel here runs 256-thread blocks (a multiple of 32)

enum class SumKind { kMoments, kGrad, kPlain };

// block_sum2: the sums of a and b over the block, valid in thread 0; a fixed tree (warp
// shuffles, then the warps' results in order), so the result depends only on the values
// each thread brought. Every thread of the block must call it.
__device__ void block_sum2(double& a, double& b) {
  __shared__ double sa[32], sb[32];
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sa[warp] = a;
    sb[warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    a = lane < warps ? sa[lane] : 0.0;
    b = lane < warps ? sb[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) {
      a += __shfl_down_sync(0xffffffffu, a, o);
      b += __shfl_down_sync(0xffffffffu, b, o);
    }
  }
  __syncthreads();  // sa / sb may be written again by the caller's next round
}

// channel_partials: one block per (channel, part) work item (grid-stride over items). The
// part covers the channel's values m in [m0, m1), m = i * s + j for plane i and offset j;
// a thread steps m by blockDim.x, carrying (i, j) along without dividing again.
//   kMoments: a = sum(x - k), b = sum((x - k)^2), k = x[ch * s]
//   kGrad:    a = sum(dy),    b = sum(dy * (x - mean[ch]))
//   kPlain:   a = sum(x),     b = 0
template <SumKind kKind>
__global__ void channel_partials_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                        const float* __restrict__ mean, int64_t n, int64_t c, int64_t s,
                                        int64_t parts, double* __restrict__ partial) {
  const int64_t count = n * s;
  const int64_t chunk = (count + parts - 1) / parts;
  const int64_t items = c * parts;
  const int64_t step = blockDim.x;
  const int64_t di = step / s, dj = step - di * s;
  for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
    const int64_t ch = w / parts, part = w - ch * parts;
    const int64_t m0 = part * chunk;
    const int64_t m1 = m0 + chunk < count ? m0 + chunk : count;
    double shift = 0.0;
    if constexpr (kKind == SumKind::kMoments) shift = x[ch * s];
    if constexpr (kKind == SumKind::kGrad) shift = mean[ch];
    double a = 0.0, b = 0.0;
    int64_t m = m0 + threadIdx.x;
    if (m < m1) {
      int64_t i = m / s, j = m - (m / s) * s;
      for (; m < m1; m += step) {
        const int64_t off = (i * c + ch) * s + j;
        if constexpr (kKind == SumKind::kMoments) {
          const double d = static_cast<double>(x[off]) - shift;
          a += d;
          b += d * d;
        } else if constexpr (kKind == SumKind::kGrad) {
          const double g = dy[off];
          a += g;
          b += g * (static_cast<double>(x[off]) - shift);
        } else {
          a += x[off];
        }
        j += dj;
        i += di;
        if (j >= s) {
          j -= s;
          ++i;
        }
      }
    }
    block_sum2(a, b);
    if (threadIdx.x == 0) {
      partial[2 * w] = a;
      partial[2 * w + 1] = b;
    }
  }
}

// reduce_parts: channel ch's partials added in part order.
__device__ void reduce_parts(const double* partial, int64_t ch, int64_t parts, double& a, double& b) {
  a = 0.0;
  b = 0.0;
  for (int64_t p = 0; p < parts; ++p) {
    a += partial[2 * (ch * parts + p)];
    b += partial[2 * (ch * parts + p) + 1];
  }
}

// The formulas below are the CPU kernel's (src/kernels/cpu/batch_norm.cc), in the same
// double arithmetic, so mean, invstd and the running statistics agree to the last bits
// the float sums there leave.
__global__ void bn_train_stats_kernel(const double* __restrict__ partial, const float* __restrict__ x,
                                      int64_t c, int64_t s, int64_t count, int64_t parts, float eps,
                                      float momentum, float* __restrict__ running_mean,
                                      float* __restrict__ running_var, float* __restrict__ mean,
                                      float* __restrict__ invstd) {
  for (int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; ch < c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sa, sb;
    reduce_parts(partial, ch, parts, sa, sb);
    const double m = static_cast<double>(count);
    const double k = x[ch * s];
    const double d_mean = sa / m;
    const double var = fmax(sb / m - d_mean * d_mean, 0.0);
    mean[ch] = static_cast<float>(k + d_mean);
    invstd[ch] = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
    if (running_mean != nullptr) {
      const double unbiased = var * m / (m - 1.0);
      const double mo = momentum;
      running_mean[ch] = static_cast<float>((1.0 - mo) * running_mean[ch] + mo * (k + d_mean));
      running_var[ch] = static_cast<float>((1.0 - mo) * running_var[ch] + mo * unbiased);
    }
  }
}

__global__ void bn_eval_stats_kernel(const float* __restrict__ running_mean,
                                     const float* __restrict__ running_var, int64_t c, float eps,
                                     float* __restrict__ mean, float* __restrict__ invstd) {
  for (int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; ch < c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    mean[ch] = running_mean[ch];
    invstd[ch] =
        static_cast<float>(1.0 / sqrt(static_cast<double>(running_var[ch]) + static_cast<double>(eps)));
  }
}

__global__ void bn_grad_finalize_kernel(const double* __restrict__ partial, const float* __restrict__ gamma,
                                        const float* __restrict__ invstd, int64_t c, int64_t count,
                                        int64_t parts, bool training, float* __restrict__ dgamma,
                                        float* __restrict__ dbeta, float* __restrict__ coef) {
  for (int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; ch < c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sum_dy, sum_dy_xc;
    reduce_parts(partial, ch, parts, sum_dy, sum_dy_xc);
    const double m = static_cast<double>(count);
    const double is = invstd[ch];
    dbeta[ch] = static_cast<float>(sum_dy);
    dgamma[ch] = static_cast<float>(sum_dy_xc * is);
    const double p = gamma[ch] * is;
    double q = 0.0, r = 0.0;
    if (training && count > 0) {
      q = -p * is * is * sum_dy_xc / m;
      r = -p * sum_dy / m;
    }
    coef[3 * ch] = static_cast<float>(p);
    coef[3 * ch + 1] = static_cast<float>(q);
    coef[3 * ch + 2] = static_cast<float>(r);
  }
}

__global__ void channel_sum_finalize_kernel(const double* __restrict__ partial, int64_t c, int64_t parts,
                                            float* __restrict__ out) {
  for (int64_t ch = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; ch < c;
       ch += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double a, b;
    reduce_parts(partial, ch, parts, a, b);
    out[ch] = static_cast<float>(a);
  }
}

// Elementwise passes over all n * c * s values; the channel of flat index e is
// (e / s) % c. I is uint32_t when the tensor has fewer than 2^31 values (divisions are
// several times cheaper than 64-bit ones), else int64_t.
template <typename I>
__global__ void bn_normalize_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                    const float* __restrict__ beta, const float* __restrict__ mean,
                                    const float* __restrict__ invstd, float* __restrict__ y, I total, I c,
                                    I s) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I e = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const I ch = (e / s) % c;
    const float scale = gamma[ch] * invstd[ch];
    y[e] = (x[e] - mean[ch]) * scale + beta[ch];
  }
}

template <typename I>
__global__ void bn_backward_dx_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                      const float* __restrict__ mean, const float* __restrict__ coef,
                                      float* __restrict__ dx, I total, I c, I s) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I e = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const I ch = (e / s) % c;
    dx[e] = dy[e] * coef[3 * ch] + (x[e] - mean[ch]) * coef[3 * ch + 1] + coef[3 * ch + 2];
  }
}

bool fits_u32(int64_t total) { return total < (int64_t{1} << 31); }

// partial_blocks: the grid of a partials kernel (grid-stride over the items beyond it).
unsigned partial_blocks(int64_t items) { return static_cast<unsigned>(items < 65535 ? items : 65535); }

template <SumKind kKind>
void launch_partials(const float* x, const float* dy, const float* mean, int64_t n, int64_t c, int64_t s,
                     int64_t parts, double* partial, cudaStream_t stream) {
  if (parts <= 0 || c <= 0 || n * s <= 0) return;
  channel_partials_kernel<kKind>
      <<<partial_blocks(c * parts), kThreads, 0, stream>>>(x, dy, mean, n, c, s, parts, partial);
}

}  // namespace

void launch_bn_moments(const float* x, int64_t n, int64_t c, int64_t s, int64_t parts, double* partial,
                       cudaStream_t stream) {
  launch_partials<SumKind::kMoments>(x, nullptr, nullptr, n, c, s, parts, partial, stream);
}

void launch_bn_train_stats(const double* partial, const float* x, int64_t n, int64_t c, int64_t s,
                           int64_t parts, float eps, float momentum, float* running_mean, float* running_var,
                           float* mean, float* invstd, cudaStream_t stream) {
  if (c <= 0) return;
  bn_train_stats_kernel<<<blocks(c, kThreads), kThreads, 0, stream>>>(
      partial, x, c, s, n * s, parts, eps, momentum, running_mean, running_var, mean, invstd);
}

void launch_bn_eval_stats(const float* running_mean, const float* running_var, int64_t c, float eps,
                          float* mean, float* invstd, cudaStream_t stream) {
  if (c <= 0) return;
  bn_eval_stats_kernel<<<blocks(c, kThreads), kThreads, 0, stream>>>(running_mean, running_var, c, eps, mean,
                                                                     invstd);
}

void launch_bn_normalize(const float* x, const float* gamma, const float* beta, const float* mean,
                         const float* invstd, float* y, int64_t n, int64_t c, int64_t s,
                         cudaStream_t stream) {
  const int64_t total = n * c * s;
  if (total <= 0) return;
  if (fits_u32(total)) {
    bn_normalize_kernel<uint32_t><<<blocks(total, kThreads), kThreads, 0, stream>>>(
        x, gamma, beta, mean, invstd, y, static_cast<uint32_t>(total), static_cast<uint32_t>(c),
        static_cast<uint32_t>(s));
  } else {
    bn_normalize_kernel<int64_t>
        <<<blocks(total, kThreads), kThreads, 0, stream>>>(x, gamma, beta, mean, invstd, y, total, c, s);
  }
}

void launch_bn_grad_sums(const float* x, const float* dy, const float* mean, int64_t n, int64_t c, int64_t s,
                         int64_t parts, double* partial, cudaStream_t stream) {
  launch_partials<SumKind::kGrad>(x, dy, mean, n, c, s, parts, partial, stream);
}

void launch_bn_grad_finalize(const double* partial, const float* gamma, const float* invstd, int64_t c,
                             int64_t count, int64_t parts, bool training, float* dgamma, float* dbeta,
                             float* coef, cudaStream_t stream) {
  if (c <= 0) return;
  bn_grad_finalize_kernel<<<blocks(c, kThreads), kThreads, 0, stream>>>(partial, gamma, invstd, c, count,
                                                                        parts, training, dgamma, dbeta, coef);
}

void launch_bn_backward_dx(const float* x, const float* dy, const float* mean, const float* coef, float* dx,
                           int64_t n, int64_t c, int64_t s, cudaStream_t stream) {
  const int64_t total = n * c * s;
  if (total <= 0) return;
  if (fits_u32(total)) {
    bn_backward_dx_kernel<uint32_t><<<blocks(total, kThreads), kThreads, 0, stream>>>(
        x, dy, mean, coef, dx, static_cast<uint32_t>(total), static_cast<uint32_t>(c),
        static_cast<uint32_t>(s));
  } else {
    bn_backward_dx_kernel<int64_t>
        <<<blocks(total, kThreads), kThreads, 0, stream>>>(x, dy, mean, coef, dx, total, c, s);
  }
}

void launch_channel_sum(const float* x, int64_t n, int64_t c, int64_t s, int64_t parts, double* partial,
                        float* out, cudaStream_t stream) {
  if (c <= 0) return;
  launch_partials<SumKind::kPlain>(x, nullptr, nullptr, n, c, s, parts, partial, stream);
  // With nothing summed (parts 0) the finalize writes zeros.
  channel_sum_finalize_kernel<<<blocks(c, kThreads), kThreads, 0, stream>>>(partial, c, n * s > 0 ? parts : 0,
                                                                            out);
}

}  // namespace mtc::cuda
