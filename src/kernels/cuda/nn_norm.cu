// Row-reduction kernels: softmax / log_softmax and their gradient, cross_entropy and its
// gradient, layer_norm and its gradient, and topk. They follow the CPU kernels' arithmetic
// (src/kernels/cpu/softmax.cc, layer_norm.cc): exp in float where the CPU takes it in
// float, sums in double, the same casts. A contiguous line (softmax over the last dim,
// a logits row, a layer_norm row) is one block: each thread sums its strided share in
// order, then the warps combine in a fixed shuffle tree. A strided line (softmax over an
// inner dim) is one thread, summing sequentially exactly as the CPU does, with
// neighbouring threads reading neighbouring addresses. The block size is a function of the
// line length only, so every result is bit-identical from run to run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/nn_norm_launch.h"

namespace mtc::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMaxRowThreads = 1024;
constexpr int64_t kMaxGrid = 2097120;  // as launch.h's blocks(): kernels loop past it

__device__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(kFullMask, v, o);
  return v;
}

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(kFullMask, v, o));
  return v;
}

// block_sum: the sum of every thread's v (blockDim.x a multiple of 32), in a fixed order,
// returned to all threads. sh: 33 doubles of shared memory. Call from uniform control flow.
__device__ double block_sum(double v, double* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_sum(lane < warps ? sh[lane] : 0.0);
    if (lane == 0) sh[32] = v;
  }
  __syncthreads();
  const double r = sh[32];
  __syncthreads();  // sh is free for the next call
  return r;
}

// block_max: the largest v over the block, to all threads. sh: 33 floats.
__device__ float block_max(float v, float* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_max(lane < warps ? sh[lane] : -INFINITY);
    if (lane == 0) sh[32] = v;
  }
  __syncthreads();
  const float r = sh[32];
  __syncthreads();
  return r;
}

// row_threads: the block size for lines of n elements: a power of two in [32, 1024].
int row_threads(int64_t n) {
  int t = 32;
  while (t < n && t < kMaxRowThreads) t *= 2;
  return t;
}

unsigned row_grid(int64_t rows) { return static_cast<unsigned>(rows < kMaxGrid ? rows : kMaxGrid); }

// ---- softmax ----

// Contiguous lines (inner == 1): one block per line.
__global__ void __launch_bounds__(kMaxRowThreads)
    softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t lines, int64_t n,
                        bool log_out) {
  __shared__ double shd[33];
  __shared__ float shf[33];
  for (int64_t line = blockIdx.x; line < lines; line += gridDim.x) {
    const float* xl = x + line * n;
    float* yl = y + line * n;
    float m = -INFINITY;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) m = fmaxf(m, xl[k]);
    m = block_max(m, shf);
    double acc = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const float e = expf(xl[k] - m);
      if (!log_out) yl[k] = e;
      acc += e;
    }
    acc = block_sum(acc, shd);
    if (log_out) {
      const double lse = m + log(acc);
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) yl[k] = static_cast<float>(xl[k] - lse);
    } else {
      const float inv = static_cast<float>(1.0 / acc);
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) yl[k] *= inv;  // this thread's own e
    }
  }
}

// Strided lines (inner > 1): one thread per line, in the CPU's order.
__global__ void softmax_strided_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t outer,
                                       int64_t n, int64_t inner, bool log_out) {
  const int64_t lines = outer * inner;
  for (int64_t l = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; l < lines;
       l += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t first = l / inner * n * inner + l % inner;
    const float* xl = x + first;
    float* yl = y + first;
    float m = xl[0];
    for (int64_t k = 1; k < n; ++k) m = fmaxf(m, xl[k * inner]);
    double acc = 0;
    for (int64_t k = 0; k < n; ++k) {
      const float e = expf(xl[k * inner] - m);
      if (!log_out) yl[k * inner] = e;
      acc += e;
    }
    if (log_out) {
      const double lse = m + log(acc);
      for (int64_t k = 0; k < n; ++k) yl[k * inner] = static_cast<float>(xl[k * inner] - lse);
    } else {
      const float inv = static_cast<float>(1.0 / acc);
      for (int64_t k = 0; k < n; ++k) yl[k * inner] *= inv;
    }
  }
}

// softmax:     dx = y * (dy - sum(dy * y));  log_softmax: dx = dy - exp(y) * sum(dy).
__global__ void __launch_bounds__(kMaxRowThreads)
    softmax_grad_rows_kernel(const float* __restrict__ y, const float* __restrict__ dy,
                             float* __restrict__ dx, int64_t lines, int64_t n, bool log_out) {
  __shared__ double shd[33];
  for (int64_t line = blockIdx.x; line < lines; line += gridDim.x) {
    const float* yl = y + line * n;
    const float* gl = dy + line * n;
    float* dl = dx + line * n;
    double acc = 0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x)
      acc += log_out ? gl[k] : static_cast<double>(gl[k]) * yl[k];
    acc = block_sum(acc, shd);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      dl[k] =
          log_out ? static_cast<float>(gl[k] - expf(yl[k]) * acc) : static_cast<float>(yl[k] * (gl[k] - acc));
    }
  }
}

__global__ void softmax_grad_strided_kernel(const float* __restrict__ y, const float* __restrict__ dy,
                                            float* __restrict__ dx, int64_t outer, int64_t n, int64_t inner,
                                            bool log_out) {
  const int64_t lines = outer * inner;
  for (int64_t l = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; l < lines;
       l += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t first = l / inner * n * inner + l % inner;
    const float* yl = y + first;
    const float* gl = dy + first;
    float* dl = dx + first;
    double acc = 0;
    if (log_out) {
      for (int64_t k = 0; k < n; ++k) acc += gl[k * inner];
      for (int64_t k = 0; k < n; ++k)
        dl[k * inner] = static_cast<float>(gl[k * inner] - expf(yl[k * inner]) * acc);
    } else {
      for (int64_t k = 0; k < n; ++k) acc += static_cast<double>(gl[k * inner]) * yl[k * inner];
      for (int64_t k = 0; k < n; ++k)
        dl[k * inner] = static_cast<float>(yl[k * inner] * (gl[k * inner] - acc));
    }
  }
}

// ---- cross_entropy ----

// row_log_sum_exp: log(sum exp(xr)) over c > 0 elements, the max taken out first (the CPU's
// log_sum_exp), computed by the whole block.
__device__ double row_log_sum_exp(const float* xr, int64_t c, double* shd, float* shf) {
  float m = -INFINITY;
  for (int64_t k = threadIdx.x; k < c; k += blockDim.x) m = fmaxf(m, xr[k]);
  m = block_max(m, shf);
  double acc = 0;
  for (int64_t k = threadIdx.x; k < c; k += blockDim.x) acc += expf(xr[k] - m);
  acc = block_sum(acc, shd);
  return m + log(acc);
}

__global__ void __launch_bounds__(kMaxRowThreads)
    cross_entropy_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ labels, int64_t n,
                              int64_t c, double* __restrict__ loss) {
  __shared__ double shd[33];
  __shared__ float shf[33];
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const float* xr = x + i * c;
    const double lse = row_log_sum_exp(xr, c, shd, shf);
    if (threadIdx.x == 0) {
      const int32_t label = labels[i];
      loss[i] = label >= 0 && label < c ? lse - xr[label] : nan("");
    }
  }
}

// mean_kernel: out[0] = the sum of loss[0, n) / divisor (one block; the mean, NaN for
// n = 0, as on the CPU, when divisor is n).
__global__ void __launch_bounds__(kMaxRowThreads)
    mean_kernel(const double* __restrict__ loss, int64_t n, double divisor, float* __restrict__ out) {
  __shared__ double shd[33];
  double acc = 0;
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) acc += loss[k];
  acc = block_sum(acc, shd);
  if (threadIdx.x == 0) out[0] = static_cast<float>(acc / divisor);
}

__global__ void __launch_bounds__(kMaxRowThreads)
    cross_entropy_grad_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ labels,
                                   const float* __restrict__ dy, int64_t n, int64_t c, double divisor,
                                   float* __restrict__ dx) {
  __shared__ double shd[33];
  __shared__ float shf[33];
  const double g = static_cast<double>(dy[0]) / divisor;
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const float* xr = x + i * c;
    const double lse = row_log_sum_exp(xr, c, shd, shf);
    const int64_t label = labels[i];
    for (int64_t k = threadIdx.x; k < c; k += blockDim.x) {
      const double p = exp(xr[k] - lse) - (k == label ? 1.0 : 0.0);
      dx[i * c + k] = static_cast<float>(p * g);
    }
  }
}

// ---- layer_norm ----

struct RowStats {
  double mean, rstd;  // rstd = 1 / sqrt(biased variance + eps)
};

// row_stats: the CPU's two-pass statistics of one row, computed by the whole block.
__device__ RowStats row_stats(const float* xr, int64_t d, float eps, double* shd) {
  double sum = 0;
  for (int64_t k = threadIdx.x; k < d; k += blockDim.x) sum += xr[k];
  const double mean = block_sum(sum, shd) / static_cast<double>(d);
  double sq = 0;
  for (int64_t k = threadIdx.x; k < d; k += blockDim.x) sq += (xr[k] - mean) * (xr[k] - mean);
  sq = block_sum(sq, shd);
  return {mean, 1.0 / sqrt(sq / static_cast<double>(d) + eps)};
}

__global__ void __launch_bounds__(kMaxRowThreads)
    layer_norm_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                      const float* __restrict__ beta, float* __restrict__ y, int64_t rows, int64_t d,
                      float eps) {
  __shared__ double shd[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    const RowStats s = row_stats(xr, d, eps, shd);
    for (int64_t k = threadIdx.x; k < d; k += blockDim.x) {
      float v = static_cast<float>((xr[k] - s.mean) * s.rstd);
      if (gamma) v *= gamma[k];
      if (beta) v += beta[k];
      yr[k] = v;
    }
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma, per row; each
// row's statistics are kept (mean_out, rstd_out) for the parameter gradients.
__global__ void __launch_bounds__(kMaxRowThreads)
    layer_norm_grad_rows_kernel(const float* __restrict__ x, const float* __restrict__ gamma,
                                const float* __restrict__ dy, float* __restrict__ dx,
                                double* __restrict__ mean_out, double* __restrict__ rstd_out, int64_t rows,
                                int64_t d, float eps) {
  __shared__ double shd[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * d;
    const float* gr = dy + r * d;
    const RowStats s = row_stats(xr, d, eps, shd);
    double mg = 0, mgx = 0;
    for (int64_t k = threadIdx.x; k < d; k += blockDim.x) {
      const double g = gamma ? static_cast<double>(gr[k]) * gamma[k] : gr[k];
      mg += g;
      mgx += g * (xr[k] - s.mean) * s.rstd;
    }
    mg = block_sum(mg, shd) / static_cast<double>(d);
    mgx = block_sum(mgx, shd) / static_cast<double>(d);
    for (int64_t k = threadIdx.x; k < d; k += blockDim.x) {
      const double g = gamma ? static_cast<double>(gr[k]) * gamma[k] : gr[k];
      const double xhat = (xr[k] - s.mean) * s.rstd;
      dx[r * d + k] = static_cast<float>(s.rstd * (g - mg - xhat * mgx));
    }
    if (threadIdx.x == 0) {
      mean_out[r] = s.mean;
      rstd_out[r] = s.rstd;
    }
  }
}

// layer_norm_param_partial: block (kColTile, kRowLanes) at (column tile, chunk) sums
// dy * xhat and dy over the chunk's rows for its columns; lanes are added in lane order.
__global__ void layer_norm_param_partial_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                                const double* __restrict__ mean,
                                                const double* __restrict__ rstd, int64_t rows, int64_t d,
                                                int64_t chunk_rows, double* __restrict__ part_g,
                                                double* __restrict__ part_b) {
  __shared__ double sh[2][kRowLanes][kColTile];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  double sg = 0, sb = 0;
  if (c < d) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const float g = dy[r * d + c];
      sg += g * ((x[r * d + c] - mean[r]) * rstd[r]);
      sb += g;
    }
  }
  sh[0][threadIdx.y][threadIdx.x] = sg;
  sh[1][threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < d) {
    double tg = 0, tb = 0;
    for (int l = 0; l < kRowLanes; ++l) {
      tg += sh[0][l][threadIdx.x];
      tb += sh[1][l][threadIdx.x];
    }
    part_g[static_cast<int64_t>(blockIdx.y) * d + c] = tg;
    part_b[static_cast<int64_t>(blockIdx.y) * d + c] = tb;
  }
}

// layer_norm_param_finish: the chunks' sums per column, added in chunk order.
__global__ void layer_norm_param_finish_kernel(const double* __restrict__ part_g,
                                               const double* __restrict__ part_b, int64_t chunks, int64_t d,
                                               float* __restrict__ dgamma, float* __restrict__ dbeta) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < d;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double g = 0, b = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      g += part_g[k * d + c];
      b += part_b[k * d + c];
    }
    if (dgamma) dgamma[c] = static_cast<float>(g);
    if (dbeta) dbeta[c] = static_cast<float>(b);
  }
}

}  // namespace

void launch_softmax(const float* x, float* y, int64_t outer, int64_t n, int64_t inner, bool log_out,
                    cudaStream_t stream) {
  if (outer <= 0 || n <= 0 || inner <= 0) return;
  if (inner == 1) {
    softmax_rows_kernel<<<row_grid(outer), row_threads(n), 0, stream>>>(x, y, outer, n, log_out);
  } else {
    softmax_strided_kernel<<<blocks(outer * inner), 256, 0, stream>>>(x, y, outer, n, inner, log_out);
  }
}

void launch_softmax_grad(const float* y, const float* dy, float* dx, int64_t outer, int64_t n, int64_t inner,
                         bool log_out, cudaStream_t stream) {
  if (outer <= 0 || n <= 0 || inner <= 0) return;
  if (inner == 1) {
    softmax_grad_rows_kernel<<<row_grid(outer), row_threads(n), 0, stream>>>(y, dy, dx, outer, n, log_out);
  } else {
    softmax_grad_strided_kernel<<<blocks(outer * inner), 256, 0, stream>>>(y, dy, dx, outer, n, inner,
                                                                           log_out);
  }
}

size_t cross_entropy_scratch_bytes(int64_t n) { return sizeof(double) * static_cast<size_t>(n < 1 ? 1 : n); }

void launch_cross_entropy(const float* x, const int32_t* labels, int64_t n, int64_t c, double divisor, float* out,
                          void* scratch, cudaStream_t stream) {
  auto* loss = static_cast<double*>(scratch);
  if (n > 0) cross_entropy_rows_kernel<<<row_grid(n), row_threads(c), 0, stream>>>(x, labels, n, c, loss);
  mean_kernel<<<1, kMaxRowThreads, 0, stream>>>(loss, n, divisor, out);
}

void launch_cross_entropy_grad(const float* x, const int32_t* labels, const float* dy, int64_t n, int64_t c,
                               double divisor, float* dx, cudaStream_t stream) {
  if (n <= 0 || c <= 0) return;
  cross_entropy_grad_rows_kernel<<<row_grid(n), row_threads(c), 0, stream>>>(x, labels, dy, n, c, divisor, dx);
}

void launch_layer_norm(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
                       int64_t d, float eps, cudaStream_t stream) {
  if (rows <= 0 || d <= 0) return;
  layer_norm_kernel<<<row_grid(rows), row_threads(d), 0, stream>>>(x, gamma, beta, y, rows, d, eps);
}

size_t layer_norm_grad_scratch_bytes(int64_t rows, int64_t d) {
  const ColumnChunks ch = column_chunks(rows, d);
  const size_t r = static_cast<size_t>(rows < 1 ? 1 : rows), cols = static_cast<size_t>(d < 1 ? 1 : d);
  return sizeof(double) * (2 * r + 2 * static_cast<size_t>(ch.count) * cols);
}

void launch_layer_norm_grad(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                            float* dbeta, int64_t rows, int64_t d, float eps, void* scratch,
                            cudaStream_t stream) {
  if (d <= 0) return;
  const ColumnChunks ch = column_chunks(rows, d);
  auto* mean = static_cast<double*>(scratch);
  double* rstd = mean + (rows < 1 ? 1 : rows);
  double* part_g = rstd + (rows < 1 ? 1 : rows);
  double* part_b = part_g + ch.count * d;
  if (rows > 0) {
    layer_norm_grad_rows_kernel<<<row_grid(rows), row_threads(d), 0, stream>>>(x, gamma, dy, dx, mean, rstd,
                                                                               rows, d, eps);
  }
  if (!dgamma && !dbeta) return;
  const dim3 grid(static_cast<unsigned>((d + kColTile - 1) / kColTile), static_cast<unsigned>(ch.count));
  layer_norm_param_partial_kernel<<<grid, dim3(kColTile, kRowLanes), 0, stream>>>(
      x, dy, mean, rstd, rows, d, ch.rows_each, part_g, part_b);
  layer_norm_param_finish_kernel<<<blocks(d), 256, 0, stream>>>(part_g, part_b, ch.count, d, dgamma, dbeta);
}

// ---- topk ----

// topk_before: whether row element i (value u) comes before j (value v) in TopkOp's
// order: larger values first, NaN after every number, equal values by index.
__device__ bool topk_before(float u, int64_t i, float v, int64_t j) {
  const bool nu = isnan(u), nv = isnan(v);
  if (nu || nv) return nu != nv ? !nu : i < j;
  return u != v ? u > v : i < j;
}

// One thread per row: k selection passes, each taking the first element in TopkOp's
// order after the one taken last (the order is strict, so no element is taken twice).
__global__ void topk_rows_kernel(const float* __restrict__ x, int64_t rows, int64_t c, int k,
                                 int32_t* __restrict__ y) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* xr = x + r * c;
    int64_t last = -1;
    for (int j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t i = 0; i < c; ++i) {
        if (last >= 0 && !topk_before(xr[last], last, xr[i], i)) continue;  // taken already
        if (best < 0 || topk_before(xr[i], i, xr[best], best)) best = i;
      }
      y[r * k + j] = static_cast<int32_t>(best);
      last = best;
    }
  }
}

void launch_topk(const float* x, int64_t rows, int64_t c, int k, int32_t* y, cudaStream_t stream) {
  if (rows == 0) return;
  const int threads = 128;
  const int64_t grid = std::min<int64_t>((rows + threads - 1) / threads, 65535);
  topk_rows_kernel<<<static_cast<unsigned>(grid), threads, 0, stream>>>(x, rows, c, k, y);
}

}  // namespace mtc::cuda
